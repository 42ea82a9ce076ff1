import { useState } from 'preact/hooks';
import type { ApiKey, CreateApiKeyRequest } from '@fleet/client';
import { replaceQuery, useLocation } from '../router.js';
import { useConsole } from '../ui/context.js';
import { useAction, useAsync, useTicker } from '../ui/hooks.js';
import { Confirm, ErrorNotice, Field, Loading, PageHeader, Pill, SecretOnce } from '../ui/components.js';
import { formatTime } from '../ui/format.js';
import { Ago, FeatureMissing, SCOPE_INFO, CodeChecks, hasFeature, isoToLocal, issueAt, localToIso } from './admin-shared.js';

const SCOPE_OPTIONS = SCOPE_INFO.map((s) => ({ code: s.scope, what: s.what }));

const EXPIRY: { value: string; label: string; days?: number }[] = [
  { value: 'never', label: 'Never' },
  { value: '7', label: 'In 7 days', days: 7 },
  { value: '30', label: 'In 30 days', days: 30 },
  { value: '90', label: 'In 90 days', days: 90 },
  { value: '365', label: 'In a year', days: 365 },
  { value: 'date', label: 'On a date…' },
];

function keyState(k: ApiKey, now: number): 'active' | 'revoked' | 'expired' {
  if (k.revoked_at) return 'revoked';
  if (k.expires_at && Date.parse(k.expires_at) <= now) return 'expired';
  return 'active';
}

/**
 * API keys: list (revoked and expired ones behind a checkbox kept in the URL), create with scopes
 * and an optional expiry (the `ak_` key shown once), revoke. Revoking the key this tab is signed
 * in with signs it out, saying so.
 */
export function ApiKeysView(_props: object) {
  const ctx = useConsole();
  const { session } = ctx;
  const loc = useLocation();
  const enabled = hasFeature(session, 'api.access');
  const list = useAsync((signal) => (enabled ? session.client.apiKeys.list({ signal }).then((r) => r.api_keys) : Promise.resolve([])), [enabled]);
  const limits = useAsync((signal) => session.client.entitlements({ signal }).then((e) => e.limits), []);
  const [adding, setAdding] = useState(false);
  const [created, setCreated] = useState<{ name: string; key: string; scopes: string[] } | null>(null);
  const [revoking, setRevoking] = useState<ApiKey | null>(null);
  const revoke = useAction((id: string) => session.client.apiKeys.revoke(id).then(() => true));
  const now = useTicker(30_000);
  const showAll = loc.query.get('all') === '1';

  const keys = list.data ?? [];
  const names = new Map(keys.map((k) => [k.id, k.name] as const));
  const active = keys.filter((k) => keyState(k, now) === 'active');
  const shown = (showAll ? keys : active).slice().sort((a, b) => b.created_at.localeCompare(a.created_at) || a.id.localeCompare(b.id));
  const max = limits.data?.api_keys;

  return (
    <>
      <PageHeader title="API keys">
        {enabled && !adding ? (
          <button type="button" class="primary" onClick={() => (setAdding(true), setCreated(null))}>
            Create a key
          </button>
        ) : null}
      </PageHeader>
      {!enabled ? <FeatureMissing feature="api.access" /> : null}
      <p class="muted">
        Keys are stored only as hashes: a lost key cannot be shown again, only revoked and replaced.{' '}
        {max !== undefined && list.data ? `${active.length} of ${max} active keys.` : null}
      </p>
      {created ? (
        <div>
          <SecretOnce label={`API key "${created.name}" (${created.scopes.join(', ')})`} secret={created.key} />
          <button type="button" onClick={() => setCreated(null)}>
            Done, I have stored it
          </button>
        </div>
      ) : null}
      {adding ? (
        <CreateKey
          onCancel={() => setAdding(false)}
          onCreated={(k) => {
            setAdding(false);
            setCreated({ name: k.name, key: k.key, scopes: k.scopes });
            list.reload();
          }}
        />
      ) : null}
      <ErrorNotice error={list.error} action="Loading the keys" />
      <ErrorNotice error={revoke.error} action="Revoking the key" />
      {list.loading && list.data === undefined ? <Loading label="Loading keys" /> : null}
      {shown.length > 0 ? (
        <div class="table-wrap">
          <table class="keys">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Scopes</th>
                <th scope="col">Last used</th>
                <th scope="col">Expires</th>
                <th scope="col" class="hide-narrow">
                  Created
                </th>
                <th scope="col" class="hide-narrow">
                  Created by
                </th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {shown.map((k) => {
                const state = keyState(k, now);
                const mine = k.id === session.keyId;
                return (
                  <tr key={k.id} data-key-id={k.id} class={state === 'active' ? '' : 'revoked'}>
                    <td>
                      <span class="key-name">{k.name}</span> {mine ? <Pill tone="info">this session</Pill> : null}
                      {state !== 'active' ? (
                        <>
                          {' '}
                          <Pill tone="idle">{state}</Pill>
                        </>
                      ) : null}
                      <div class="muted small mono">{k.id}</div>
                    </td>
                    <td>
                      <ul class="tags">
                        {k.scopes.map((s) => (
                          <li key={s}>
                            <code>{s}</code>
                          </li>
                        ))}
                      </ul>
                    </td>
                    <td>
                      <Ago iso={k.last_used_at} now={now} />
                    </td>
                    <td>{k.expires_at ? <time dateTime={k.expires_at}>{formatTime(k.expires_at)}</time> : <span class="muted">never</span>}</td>
                    <td class="hide-narrow">
                      <Ago iso={k.created_at} now={now} />
                    </td>
                    <td class="hide-narrow">{k.created_by === 'bootstrap' ? <span class="muted">bootstrap</span> : names.get(k.created_by) ?? <span class="mono small">{k.created_by}</span>}</td>
                    <td class="actions">
                      {state === 'revoked' ? (
                        <span class="muted small">
                          revoked <Ago iso={k.revoked_at} now={now} />
                        </span>
                      ) : (
                        <button type="button" class="danger-outline" onClick={() => setRevoking(k)} aria-label={`Revoke ${k.name}`}>
                          Revoke
                        </button>
                      )}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : list.data ? (
        <p class="empty panel">No active key.</p>
      ) : null}
      {keys.length > active.length ? (
        <label class="check small">
          <input
            type="checkbox"
            checked={showAll}
            onChange={(e) => {
              const q = new URLSearchParams(loc.query);
              if (e.currentTarget.checked) q.set('all', '1');
              else q.delete('all');
              replaceQuery(q);
            }}
          />{' '}
          Show revoked and expired keys ({keys.length - active.length})
        </label>
      ) : null}
      <Confirm
        open={revoking !== null}
        title={revoking?.id === session.keyId ? 'Revoke the key you are signed in with?' : 'Revoke this key?'}
        confirmLabel="Revoke key"
        danger
        onCancel={() => setRevoking(null)}
        onConfirm={() => {
          const k = revoking;
          setRevoking(null);
          if (!k) return;
          void revoke.run(k.id).then((ok) => {
            if (!ok) return;
            if (k.id === session.keyId) ctx.authLost(`You revoked the key you were signed in with ("${k.name}"). Sign in with another key.`);
            else list.reload();
          });
        }}
      >
        {revoking ? (
          <>
            <p>
              <strong class="key-name">{revoking.name}</strong> stops working at once, for every program using it. This cannot be undone.
            </p>
            {revoking.id === session.keyId ? <p class="notice warn">This is the key of this session: you will be signed out.</p> : null}
          </>
        ) : null}
      </Confirm>
    </>
  );
}

function CreateKey({ onCreated, onCancel }: { onCreated: (k: ApiKey & { key: string }) => void; onCancel: () => void }) {
  const { session } = useConsole();
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState<Set<string>>(new Set());
  const [expiry, setExpiry] = useState('never');
  const [date, setDate] = useState(() => isoToLocal(new Date(Date.now() + 30 * 86_400_000)));
  const expiresAt = (): string | undefined => {
    const preset = EXPIRY.find((e) => e.value === expiry);
    if (preset?.days) return new Date(Date.now() + preset.days * 86_400_000).toISOString();
    if (expiry === 'date') return localToIso(date);
    return undefined;
  };
  const create = useAction(() => {
    const at = expiresAt();
    const body: CreateApiKeyRequest = { name: name.trim(), scopes: SCOPE_INFO.map((s) => s.scope).filter((s) => scopes.has(s)) as CreateApiKeyRequest['scopes'], ...(at ? { expires_at: at } : {}) };
    return session.client.apiKeys.create(body);
  });
  const nameError = issueAt(create.error, '/name');
  const scopesError = issueAt(create.error, '/scopes');
  const expiryError = issueAt(create.error, '/expires_at');
  return (
    <form
      class="create-form panel"
      aria-label="New API key"
      onSubmit={(e) => {
        e.preventDefault();
        void create.run().then((k) => k && onCreated(k));
      }}
    >
      <h2>New API key</h2>
      <Field label="Name" id="key-name" error={nameError} hint="Who or what uses it, e.g. training-pipeline.">
        <input id="key-name" required maxLength={128} value={name} onInput={(e) => setName(e.currentTarget.value)} autoComplete="off" aria-describedby="key-name-hint" />
      </Field>
      <CodeChecks legend="Scopes" name="scopes" options={SCOPE_OPTIONS} chosen={scopes} onChange={setScopes} error={scopesError} />
      <div class="row align-end">
        <Field label="Expires" id="key-expiry">
          <select id="key-expiry" value={expiry} onChange={(e) => setExpiry(e.currentTarget.value)}>
            {EXPIRY.map((o) => (
              <option key={o.value} value={o.value}>
                {o.label}
              </option>
            ))}
          </select>
        </Field>
        {expiry === 'date' ? (
          <Field label="Expiry date and time (local)" id="key-expiry-date" error={expiryError}>
            <input id="key-expiry-date" type="datetime-local" required value={date} onInput={(e) => setDate(e.currentTarget.value)} />
          </Field>
        ) : null}
      </div>
      <ErrorNotice error={create.error} action="Creating the key" />
      <div class="row">
        <button type="submit" class="primary" disabled={create.busy || name.trim() === '' || scopes.size === 0}>
          {create.busy ? 'Creating…' : 'Create key'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
