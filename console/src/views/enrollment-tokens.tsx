import { useState } from 'preact/hooks';
import type { CreateEnrollmentTokenRequest } from '@fleet/client';
import { navigate, useLocation } from '../router.js';
import { useConsole } from '../ui/context.js';
import { useAction, useAsync, useTicker } from '../ui/hooks.js';
import { Confirm, ErrorNotice, Field, Loading, PageHeader, Pill, SecretOnce } from '../ui/components.js';
import { formatTime } from '../ui/format.js';
import { Ago, CursorPager, FeatureMissing, hasFeature, isoToLocal, issueAt, localToIso } from './admin-shared.js';

const PAGE = 50;
const HOUR = 3_600_000;
const EXPIRY: { value: string; label: string; ms?: number }[] = [
  { value: '1h', label: 'In 1 hour', ms: HOUR },
  { value: '24h', label: 'In 24 hours (default)', ms: 24 * HOUR },
  { value: '7d', label: 'In 7 days', ms: 7 * 24 * HOUR },
  { value: '30d', label: 'In 30 days', ms: 30 * 24 * HOUR },
  { value: 'date', label: 'On a date…' },
];

interface TokenInfo {
  id: string;
  token_prefix: string;
  name_prefix: string | null;
  max_uses: number;
  uses: number;
  expires_at: string;
  created_at: string;
  revoked_at: string | null;
}

function tokenState(t: TokenInfo, now: number): { label: string; tone: 'ok' | 'idle' | 'warn' } {
  if (t.revoked_at) return { label: 'revoked', tone: 'idle' };
  if (t.uses >= t.max_uses) return { label: 'used up', tone: 'idle' };
  if (Date.parse(t.expires_at) <= now) return { label: 'expired', tone: 'idle' };
  return { label: 'usable', tone: 'ok' };
}

/**
 * Enrollment tokens: create (uses, expiry, a robot name prefix; the `ret_` token shown once with
 * how to use it), the paged list (cursor in the URL) with each token's prefix, uses and state,
 * and revoke.
 */
export function EnrollmentTokensView(_props: object) {
  const { session } = useConsole();
  const loc = useLocation();
  const enabled = hasFeature(session, 'api.access');
  const cursor = loc.query.get('cursor');
  const list = useAsync((signal) => (enabled ? session.client.enrollmentTokens.list({ signal, limit: PAGE, ...(cursor ? { cursor } : {}) }) : Promise.resolve(null)), [cursor, enabled]);
  const [adding, setAdding] = useState(false);
  const [created, setCreated] = useState<{ token: string; max_uses: number; expires_at: string } | null>(null);
  const [revoking, setRevoking] = useState<TokenInfo | null>(null);
  const revoke = useAction((id: string) => session.client.enrollmentTokens.revoke(id).then(() => true));
  const now = useTicker(30_000);
  const tokens: TokenInfo[] = list.data?.enrollment_tokens ?? [];

  return (
    <>
      <PageHeader title="Enrollment tokens">
        {enabled && !adding ? (
          <button type="button" class="primary" onClick={() => (setAdding(true), setCreated(null))}>
            Create a token
          </button>
        ) : null}
      </PageHeader>
      {!enabled ? <FeatureMissing feature="api.access" /> : null}
      <p class="muted">
        A robot exchanges a token for its own credentials (<code>fleet-agent enroll</code>), so no API key ever sits on a robot. A token enrolls up to its number of uses
        before it expires.
      </p>
      {created ? (
        <div>
          <SecretOnce label={`Enrollment token (up to ${created.max_uses} robot${created.max_uses === 1 ? '' : 's'}, until ${formatTime(created.expires_at)})`} secret={created.token} />
          <p class="small">On each robot:</p>
          <pre class="command">
            fleet-agent enroll --api {window.location.origin} --token {created.token} --data-dir /var/lib/fleet-agent
          </pre>
          <button type="button" onClick={() => setCreated(null)}>
            Done, I have stored it
          </button>
        </div>
      ) : null}
      {adding ? (
        <CreateToken
          onCancel={() => setAdding(false)}
          onCreated={(t) => {
            setAdding(false);
            setCreated(t);
            list.reload();
          }}
        />
      ) : null}
      <ErrorNotice error={list.error} action="Loading the tokens" />
      <ErrorNotice error={revoke.error} action="Revoking the token" />
      {list.loading && list.data === undefined ? <Loading label="Loading tokens" /> : null}
      {list.data && tokens.length === 0 ? <p class="empty panel">{cursor ? 'No more tokens.' : 'No enrollment token yet.'}</p> : null}
      {tokens.length > 0 ? (
        <div class="table-wrap">
          <table class="tokens">
            <thead>
              <tr>
                <th scope="col">Token</th>
                <th scope="col">State</th>
                <th scope="col" class="num">
                  Uses
                </th>
                <th scope="col">Default names</th>
                <th scope="col">Expires</th>
                <th scope="col" class="hide-narrow">
                  Created
                </th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {tokens.map((t) => {
                const st = tokenState(t, now);
                return (
                  <tr key={t.id} data-token-id={t.id} class={st.tone === 'ok' ? '' : 'revoked'}>
                    <td>
                      <code>{t.token_prefix}…</code>
                      <div class="muted small mono">{t.id}</div>
                    </td>
                    <td>
                      <Pill tone={st.tone}>{st.label}</Pill>
                    </td>
                    <td class="num">
                      {t.uses.toLocaleString()} of {t.max_uses.toLocaleString()}
                    </td>
                    <td>
                      <span class={t.name_prefix ? '' : 'muted'}>{t.name_prefix ?? 'robot'}-1, -2…</span>
                    </td>
                    <td>
                      <time dateTime={t.expires_at}>{formatTime(t.expires_at)}</time>
                    </td>
                    <td class="hide-narrow">
                      <Ago iso={t.created_at} now={now} />
                    </td>
                    <td class="actions">
                      {t.revoked_at ? (
                        <span class="muted small">
                          revoked <Ago iso={t.revoked_at} now={now} />
                        </span>
                      ) : st.tone === 'ok' ? (
                        <button type="button" class="danger-outline" onClick={() => setRevoking(t)} aria-label={`Revoke token ${t.token_prefix}`}>
                          Revoke
                        </button>
                      ) : null}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}
      <CursorPager
        cursor={cursor}
        next={list.data?.cursor}
        label="Tokens"
        onPage={(c) => navigate(`/tokens${c ? `?cursor=${encodeURIComponent(c)}` : ''}`)}
      />
      <Confirm
        open={revoking !== null}
        title="Revoke this enrollment token?"
        confirmLabel="Revoke token"
        danger
        onCancel={() => setRevoking(null)}
        onConfirm={() => {
          const t = revoking;
          setRevoking(null);
          if (t) void revoke.run(t.id).then((ok) => ok && list.reload());
        }}
      >
        {revoking ? (
          <p>
            <code>{revoking.token_prefix}…</code> enrolls no robot from now on ({revoking.max_uses - revoking.uses} use{revoking.max_uses - revoking.uses === 1 ? '' : 's'} left). The{' '}
            {revoking.uses} robot{revoking.uses === 1 ? '' : 's'} it already enrolled keep working.
          </p>
        ) : null}
      </Confirm>
    </>
  );
}

function CreateToken({ onCreated, onCancel }: { onCreated: (t: { token: string; max_uses: number; expires_at: string }) => void; onCancel: () => void }) {
  const { session } = useConsole();
  const [prefix, setPrefix] = useState('');
  const [uses, setUses] = useState('1');
  const [expiry, setExpiry] = useState('24h');
  const [date, setDate] = useState(() => isoToLocal(new Date(Date.now() + 48 * HOUR)));
  const create = useAction(() => {
    const preset = EXPIRY.find((e) => e.value === expiry);
    const at = preset?.ms ? new Date(Date.now() + preset.ms).toISOString() : expiry === 'date' ? localToIso(date) : undefined;
    const n = Number(uses);
    const body: CreateEnrollmentTokenRequest = {
      ...(prefix.trim() ? { name_prefix: prefix.trim() } : {}),
      max_uses: Number.isInteger(n) ? n : (uses as unknown as number),
      ...(at ? { expires_at: at } : {}),
    };
    return session.client.enrollmentTokens.create(body);
  });
  const prefixError = issueAt(create.error, '/name_prefix');
  const usesError = issueAt(create.error, '/max_uses');
  const expiryError = issueAt(create.error, '/expires_at');
  return (
    <form
      class="create-form panel"
      aria-label="New enrollment token"
      onSubmit={(e) => {
        e.preventDefault();
        void create.run().then((t) => t && onCreated(t));
      }}
    >
      <h2>New enrollment token</h2>
      <div class="row align-start wrap-fields">
        <Field label="Robots it may enroll" id="token-uses" error={usesError} hint="1 to 100,000">
          <input id="token-uses" type="number" min={1} max={100000} step={1} required value={uses} onInput={(e) => setUses(e.currentTarget.value)} aria-describedby="token-uses-hint" />
        </Field>
        <Field label="Expires" id="token-expiry" error={expiry === 'date' ? undefined : expiryError}>
          <select id="token-expiry" value={expiry} onChange={(e) => setExpiry(e.currentTarget.value)}>
            {EXPIRY.map((o) => (
              <option key={o.value} value={o.value}>
                {o.label}
              </option>
            ))}
          </select>
        </Field>
        {expiry === 'date' ? (
          <Field label="Expiry date and time (local)" id="token-expiry-date" error={expiryError}>
            <input id="token-expiry-date" type="datetime-local" required value={date} onInput={(e) => setDate(e.currentTarget.value)} />
          </Field>
        ) : null}
        <Field label="Robot name prefix (optional)" id="token-prefix" error={prefixError} hint="Robots enrolled without a name of their own are called <prefix>-1, <prefix>-2, … (default robot). Letters, digits, space . _ -">
          <input id="token-prefix" value={prefix} maxLength={64} pattern="[A-Za-z0-9 ._\-]+" onInput={(e) => setPrefix(e.currentTarget.value)} autoComplete="off" aria-describedby="token-prefix-hint" />
        </Field>
      </div>
      <ErrorNotice error={create.error} action="Creating the token" />
      <div class="row">
        <button type="submit" class="primary" disabled={create.busy}>
          {create.busy ? 'Creating…' : 'Create token'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
