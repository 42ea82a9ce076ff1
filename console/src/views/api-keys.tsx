import { useState } from 'preact/hooks';
import type { ApiKey, CreateApiKeyRequest } from '@fleet/client';
import { replaceQuery, useLocation } from '../router.js';
import { useConsole } from '../ui/context.js';
import { useAction, useAsync, useTicker } from '../ui/hooks.js';
import { Field, Pill } from '../ui/components.js';
import { formatTime } from '../ui/format.js';
import { CodeTags, ConfirmAction, CreateForm, NameCell, ResourceHeader, ResourceList, ResourceTable, SecretPanel, ShowHidden, fieldIssue, useCreateFlow, useDestructive, type Column } from '../ui/resource-page.js';
import { Ago, ExpiryFields, FeatureMissing, SCOPE_INFO, CodeChecks, hasFeature, useExpiry, type ExpiryPreset } from './admin-shared.js';

const SCOPE_OPTIONS = SCOPE_INFO.map((s) => ({ code: s.scope, what: s.what }));

const DAY = 86_400_000;
const EXPIRY: readonly ExpiryPreset[] = [
  { value: 'never', label: 'Never' },
  { value: '7', label: 'In 7 days', ms: 7 * DAY },
  { value: '30', label: 'In 30 days', ms: 30 * DAY },
  { value: '90', label: 'In 90 days', ms: 90 * DAY },
  { value: '365', label: 'In a year', ms: 365 * DAY },
  { value: 'date', label: 'On a date…' },
];

const COLUMNS: readonly Column[] = ['Name', 'Scopes', 'Last used', 'Expires', ['Created', 'hide-narrow'], ['Created by', 'hide-narrow']];

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
  const flow = useCreateFlow(list.reload);
  const revoke = useDestructive(
    (k: ApiKey) => session.client.apiKeys.revoke(k.id),
    (k) => {
      if (k.id === session.keyId) ctx.authLost(`You revoked the key you were signed in with ("${k.name}"). Sign in with another key.`);
      else list.reload();
    },
  );
  const now = useTicker(30_000);
  const showAll = loc.query.get('all') === '1';

  const keys = list.data ?? [];
  const names = new Map(keys.map((k) => [k.id, k.name] as const));
  const active = keys.filter((k) => keyState(k, now) === 'active');
  const shown = (showAll ? keys : active).slice().sort((a, b) => b.created_at.localeCompare(a.created_at) || a.id.localeCompare(b.id));
  const max = limits.data?.api_keys;

  return (
    <>
      <ResourceHeader title="API keys" createLabel="Create a key" flow={flow} enabled={enabled} notice={<FeatureMissing feature="api.access" />} />
      <p class="muted">
        Keys are stored only as hashes: a lost key cannot be shown again, only revoked and replaced.{' '}
        {max !== undefined && list.data ? `${active.length} of ${max} active keys.` : null}
      </p>
      <SecretPanel flow={flow} />
      {flow.adding ? (
        <CreateKey
          onCancel={flow.cancel}
          onCreated={(k) => flow.created({ label: `API key "${k.name}" (${k.scopes.join(', ')})`, value: k.key })}
        />
      ) : null}
      <ResourceList list={list} count={shown.length} what="keys" errors={[[revoke.error, 'Revoking the key']]} empty="No active key." panel>
        <ResourceTable name="keys" columns={COLUMNS} actions="Actions">
          {shown.map((k) => {
            const state = keyState(k, now);
            const mine = k.id === session.keyId;
            return (
              <tr key={k.id} data-key-id={k.id} class={state === 'active' ? '' : 'revoked'}>
                <NameCell id={k.id}>
                  <span class="key-name">{k.name}</span> {mine ? <Pill tone="info">this session</Pill> : null}
                  {state !== 'active' ? (
                    <>
                      {' '}
                      <Pill tone="idle">{state}</Pill>
                    </>
                  ) : null}
                </NameCell>
                <td>
                  <CodeTags codes={k.scopes} />
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
                    <button type="button" class="danger-outline" onClick={() => revoke.ask(k)} aria-label={`Revoke ${k.name}`}>
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            );
          })}
        </ResourceTable>
      </ResourceList>
      <ShowHidden
        count={keys.length - active.length}
        checked={showAll}
        onChange={(checked) => {
          const q = new URLSearchParams(loc.query);
          if (checked) q.set('all', '1');
          else q.delete('all');
          replaceQuery(q);
        }}
      >
        Show revoked and expired keys
      </ShowHidden>
      <ConfirmAction action={revoke} title={revoke.item?.id === session.keyId ? 'Revoke the key you are signed in with?' : 'Revoke this key?'} confirmLabel="Revoke key" danger>
        {(k) => (
          <>
            <p>
              <strong class="key-name">{k.name}</strong> stops working at once, for every program using it. This cannot be undone.
            </p>
            {k.id === session.keyId ? <p class="notice warn">This is the key of this session: you will be signed out.</p> : null}
          </>
        )}
      </ConfirmAction>
    </>
  );
}

function CreateKey({ onCreated, onCancel }: { onCreated: (k: ApiKey & { key: string }) => void; onCancel: () => void }) {
  const { session } = useConsole();
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState<Set<string>>(new Set());
  const expiry = useExpiry(EXPIRY, 'never', 30 * DAY);
  const create = useAction(() => {
    const at = expiry.iso();
    const body: CreateApiKeyRequest = { name: name.trim(), scopes: SCOPE_INFO.map((s) => s.scope).filter((s) => scopes.has(s)) as CreateApiKeyRequest['scopes'], ...(at ? { expires_at: at } : {}) };
    return session.client.apiKeys.create(body);
  });
  const nameError = fieldIssue(create.error, '/name');
  const scopesError = fieldIssue(create.error, '/scopes');
  const expiryError = fieldIssue(create.error, '/expires_at');
  return (
    <CreateForm title="New API key" create={create} onCreated={onCreated} onCancel={onCancel} failed="Creating the key" submitLabel="Create key" ready={name.trim() !== '' && scopes.size > 0}>
      <Field label="Name" id="key-name" error={nameError} hint="Who or what uses it, e.g. training-pipeline.">
        <input id="key-name" required maxLength={128} value={name} onInput={(e) => setName(e.currentTarget.value)} autoComplete="off" aria-describedby="key-name-hint" />
      </Field>
      <CodeChecks legend="Scopes" name="scopes" options={SCOPE_OPTIONS} chosen={scopes} onChange={setScopes} error={scopesError} />
      <div class="row align-end">
        <ExpiryFields id="key-expiry" presets={EXPIRY} state={expiry} error={expiryError} />
      </div>
    </CreateForm>
  );
}
