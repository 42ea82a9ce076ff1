import { useState } from 'preact/hooks';
import type { CreateEnrollmentTokenRequest } from '@fleet/client';
import { navigate, useLocation } from '../router.js';
import { useConsole } from '../ui/context.js';
import { useAction, useAsync, useTicker } from '../ui/hooks.js';
import { Field, Pill } from '../ui/components.js';
import { formatTime } from '../ui/format.js';
import { ConfirmAction, CreateForm, NameCell, ResourceHeader, ResourceList, ResourceTable, SecretPanel, fieldIssue, useCreateFlow, useDestructive, type Column } from '../ui/resource-page.js';
import { Ago, CursorPager, ExpiryFields, FeatureMissing, hasFeature, useExpiry, type ExpiryPreset } from './admin-shared.js';

const PAGE = 50;
const HOUR = 3_600_000;
const EXPIRY: readonly ExpiryPreset[] = [
  { value: '1h', label: 'In 1 hour', ms: HOUR },
  { value: '24h', label: 'In 24 hours (default)', ms: 24 * HOUR },
  { value: '7d', label: 'In 7 days', ms: 7 * 24 * HOUR },
  { value: '30d', label: 'In 30 days', ms: 30 * 24 * HOUR },
  { value: 'date', label: 'On a date…' },
];
const COLUMNS: readonly Column[] = ['Token', 'State', ['Uses', 'num'], 'Default names', 'Expires', ['Created', 'hide-narrow']];

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
  const flow = useCreateFlow(list.reload);
  const revoke = useDestructive(
    (t: TokenInfo) => session.client.enrollmentTokens.revoke(t.id),
    () => list.reload(),
  );
  const now = useTicker(30_000);
  const tokens: TokenInfo[] = list.data?.enrollment_tokens ?? [];

  return (
    <>
      <ResourceHeader title="Enrollment tokens" createLabel="Create a token" flow={flow} enabled={enabled} notice={<FeatureMissing feature="api.access" />} />
      <p class="muted">
        A robot exchanges a token for its own credentials (<code>fleet-agent enroll</code>), so no API key ever sits on a robot. A token enrolls up to its number of uses
        before it expires.
      </p>
      <SecretPanel flow={flow}>
        {(s) => (
          <>
            <p class="small">On each robot:</p>
            <pre class="command">
              fleet-agent enroll --api {window.location.origin} --token {s.value} --data-dir /var/lib/fleet-agent
            </pre>
          </>
        )}
      </SecretPanel>
      {flow.adding ? (
        <CreateToken
          onCancel={flow.cancel}
          onCreated={(t) => flow.created({ label: `Enrollment token (up to ${t.max_uses} robot${t.max_uses === 1 ? '' : 's'}, until ${formatTime(t.expires_at)})`, value: t.token })}
        />
      ) : null}
      <ResourceList list={list} count={tokens.length} what="tokens" errors={[[revoke.error, 'Revoking the token']]} empty={cursor ? 'No more tokens.' : 'No enrollment token yet.'} panel>
        <ResourceTable name="tokens" columns={COLUMNS} actions="Actions">
          {tokens.map((t) => {
            const st = tokenState(t, now);
            return (
              <tr key={t.id} data-token-id={t.id} class={st.tone === 'ok' ? '' : 'revoked'}>
                <NameCell id={t.id}>
                  <code>{t.token_prefix}…</code>
                </NameCell>
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
                    <button type="button" class="danger-outline" onClick={() => revoke.ask(t)} aria-label={`Revoke token ${t.token_prefix}`}>
                      Revoke
                    </button>
                  ) : null}
                </td>
              </tr>
            );
          })}
        </ResourceTable>
      </ResourceList>
      <CursorPager
        cursor={cursor}
        next={list.data?.cursor}
        label="Tokens"
        onPage={(c) => navigate(`/tokens${c ? `?cursor=${encodeURIComponent(c)}` : ''}`)}
      />
      <ConfirmAction action={revoke} title="Revoke this enrollment token?" confirmLabel="Revoke token" danger>
        {(t) => (
          <p>
            <code>{t.token_prefix}…</code> enrolls no robot from now on ({t.max_uses - t.uses} use{t.max_uses - t.uses === 1 ? '' : 's'} left). The{' '}
            {t.uses} robot{t.uses === 1 ? '' : 's'} it already enrolled keep working.
          </p>
        )}
      </ConfirmAction>
    </>
  );
}

function CreateToken({ onCreated, onCancel }: { onCreated: (t: { token: string; max_uses: number; expires_at: string }) => void; onCancel: () => void }) {
  const { session } = useConsole();
  const [prefix, setPrefix] = useState('');
  const [uses, setUses] = useState('1');
  const expiry = useExpiry(EXPIRY, '24h', 48 * HOUR);
  const create = useAction(() => {
    const at = expiry.iso();
    const n = Number(uses);
    const body: CreateEnrollmentTokenRequest = {
      ...(prefix.trim() ? { name_prefix: prefix.trim() } : {}),
      max_uses: Number.isInteger(n) ? n : (uses as unknown as number),
      ...(at ? { expires_at: at } : {}),
    };
    return session.client.enrollmentTokens.create(body);
  });
  const prefixError = fieldIssue(create.error, '/name_prefix');
  const usesError = fieldIssue(create.error, '/max_uses');
  const expiryError = fieldIssue(create.error, '/expires_at');
  return (
    <CreateForm title="New enrollment token" create={create} onCreated={onCreated} onCancel={onCancel} failed="Creating the token" submitLabel="Create token">
      <div class="row align-start wrap-fields">
        <Field label="Robots it may enroll" id="token-uses" error={usesError} hint="1 to 100,000">
          <input id="token-uses" type="number" min={1} max={100000} step={1} required value={uses} onInput={(e) => setUses(e.currentTarget.value)} aria-describedby="token-uses-hint" />
        </Field>
        <ExpiryFields id="token-expiry" presets={EXPIRY} state={expiry} error={expiryError} presetError={expiryError} />
        <Field label="Robot name prefix (optional)" id="token-prefix" error={prefixError} hint="Robots enrolled without a name of their own are called <prefix>-1, <prefix>-2, … (default robot). Letters, digits, space . _ -">
          <input id="token-prefix" value={prefix} maxLength={64} pattern="[A-Za-z0-9 ._\-]+" onInput={(e) => setPrefix(e.currentTarget.value)} autoComplete="off" aria-describedby="token-prefix-hint" />
        </Field>
      </div>
    </CreateForm>
  );
}
