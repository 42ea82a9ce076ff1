import { useState } from 'preact/hooks';
import type { Destination, DestinationCheck } from '@fleet/client';
import { needs } from '../session.js';
import { useConsole } from '../ui/context.js';
import { useAction, type Async } from '../ui/hooks.js';
import { Confirm, ErrorNotice, Field, Loading, Pill, ScopedButton, SecretOnce } from '../ui/components.js';
import { formatDuration } from '../ui/format.js';
import { Ago, Section, issueAt } from './admin-shared.js';

const RETENTIONS: { value: 'keep' | 'until_all_verified_plus_72h'; label: string }[] = [
  { value: 'keep', label: 'Keep the robot\'s copy (default)' },
  { value: 'until_all_verified_plus_72h', label: 'Delete it 72 h after every destination verified it' },
];

export function retentionWords(r: string): string {
  return r === 'keep' ? 'keep local copy' : r === 'until_all_verified_plus_72h' ? 'delete local copy 72 h after verified' : r;
}

/** The grant provider's address as registered, without the scheme (always https). */
export function destinationLabel(d: Pick<Destination, 'url' | 'id'>): string {
  return d.url.replace(/^https:\/\//i, '');
}

/**
 * Destinations (grant providers) with their forwarding health over 24 hours, create (the `dsec_`
 * secret shown once), check (what a robot would get, in words) and revoke. Admin only: a key
 * without admin sees why instead of a 403.
 */
export function Destinations({ admin, list, showRevoked, onShowRevoked }: { admin: boolean; list: Async<Destination[] | null>; showRevoked: boolean; onShowRevoked: (v: boolean) => void }) {
  const { session } = useConsole();
  const [adding, setAdding] = useState(false);
  const [created, setCreated] = useState<{ id: string; secret: string; label: string } | null>(null);
  const [revoking, setRevoking] = useState<Destination | null>(null);
  const revoke = useAction((id: string) => session.client.destinations.revoke(id).then(() => true));

  if (!admin) {
    return (
      <Section title="Destinations" id="destinations-title">
        <p class="muted">
          Destinations and routing rules are shown to keys with the scope <code>admin</code>. The sync health of each robot is below.
        </p>
      </Section>
    );
  }
  const all = list.data ?? [];
  const revokedCount = all.filter((d) => d.revoked_at).length;
  const shown = showRevoked ? all : all.filter((d) => !d.revoked_at);
  return (
    <Section
      title="Destinations"
      id="destinations-title"
      actions={
        adding ? null : (
          <ScopedButton allowed={admin} why={needs('admin')} class="primary" onClick={() => (setAdding(true), setCreated(null))}>
            Add a destination
          </ScopedButton>
        )
      }
    >
      <p class="muted small">
        A destination is a grant provider of yours: for each episode the cloud asks it, signed with the destination's secret, for upload URLs; the robot then uploads
        straight to your storage.
      </p>
      {created ? (
        <div>
          <SecretOnce label={`Secret of the destination ${created.label} (${created.id})`} secret={created.secret} />
          <p class="small">
            Give it to your grant provider (for <code>fleet-sim grant-provider</code>: <code>FLEET_PROVIDER_SECRET</code>): it verifies the signature of every grant
            request with it. Then use <strong>Check</strong> to see what a robot would get.
          </p>
          <button type="button" onClick={() => setCreated(null)}>
            Done, I have stored it
          </button>
        </div>
      ) : null}
      {adding ? (
        <CreateDestination
          onCancel={() => setAdding(false)}
          onCreated={(d) => {
            setAdding(false);
            setCreated({ id: d.id, secret: d.secret, label: destinationLabel(d) });
            list.reload();
          }}
        />
      ) : null}
      {list.error ? <ErrorNotice error={list.error} action="Loading the destinations" /> : null}
      {list.data === undefined && !list.error ? <Loading label="Loading destinations" /> : null}
      {list.data && shown.length === 0 ? (
        <p class="empty">
          {all.length === 0
            ? 'No destination yet: recordings stay on the robots until you add one.'
            : 'Every destination is revoked: recordings stay on the robots until you add one.'}
        </p>
      ) : null}
      <ErrorNotice error={revoke.error} action="Revoking the destination" />
      {shown.length > 0 ? (
        <div class="table-wrap">
          <table class="destinations">
            <thead>
              <tr>
                <th scope="col">Grant provider</th>
                <th scope="col">Status</th>
                <th scope="col">Last forward</th>
                <th scope="col" class="num">
                  Forwards 24 h
                </th>
                <th scope="col" class="num">
                  Deferrals 24 h
                </th>
                <th scope="col">Last deferral</th>
                <th scope="col" class="hide-narrow">
                  Retention
                </th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {shown.map((d) => (
                <DestinationRow key={d.id} d={d} onRevoke={() => setRevoking(d)} />
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {revokedCount > 0 ? (
        <label class="check small">
          <input type="checkbox" checked={showRevoked} onChange={(e) => onShowRevoked(e.currentTarget.checked)} /> Show revoked destinations ({revokedCount})
        </label>
      ) : null}
      <Confirm
        open={revoking !== null}
        title="Revoke this destination?"
        confirmLabel="Revoke"
        danger
        onCancel={() => setRevoking(null)}
        onConfirm={() => {
          const d = revoking;
          setRevoking(null);
          if (d) void revoke.run(d.id).then((ok) => ok && list.reload());
        }}
      >
        {revoking ? (
          <p>
            <code>{revoking.url}</code> gets no grant request from now on. Data already synced stays where it is; routing rules pointing at it stop matching, and
            episodes routed to it that had not synced are routed again. This cannot be undone.
          </p>
        ) : null}
      </Confirm>
    </Section>
  );
}

function DestinationRow({ d, onRevoke }: { d: Destination; onRevoke: () => void }) {
  const { session } = useConsole();
  const check = useAction(() => session.client.destinations.check(d.id));
  const revoked = d.revoked_at !== null;
  const checked = check.result !== undefined || check.error !== undefined;
  return (
    <>
      <tr class={revoked ? 'revoked' : ''} data-destination-id={d.id}>
        <td>
          <span class="dest-url" title={d.url}>
            {destinationLabel(d)}
          </span>
          <div class="muted small mono">{d.id}</div>
        </td>
        <td>
          {revoked ? (
            <Pill tone="idle">revoked</Pill>
          ) : d.deferrals_24h > 0 && d.deferrals_24h === d.forwards_24h ? (
            <Pill tone="bad">every request deferred</Pill>
          ) : d.deferrals_24h > 0 ? (
            <Pill tone="warn">some deferred</Pill>
          ) : d.forwards_24h > 0 ? (
            <Pill tone="ok">granting</Pill>
          ) : (
            <Pill tone="idle">idle</Pill>
          )}
        </td>
        <td data-col="last-forward">
          <Ago iso={d.last_forward_at} />
        </td>
        <td class="num" data-col="forwards">
          {d.forwards_24h.toLocaleString()}
        </td>
        <td class="num">{d.deferrals_24h.toLocaleString()}</td>
        <td class="deferral">
          {d.last_deferral ? (
            <>
              <span>{d.last_deferral.reason}</span>
              <div class="muted small">
                <Ago iso={d.last_deferral.at} />
              </div>
            </>
          ) : (
            <span class="muted">none</span>
          )}
        </td>
        <td class="hide-narrow small">{retentionWords(d.retention)}</td>
        <td class="actions">
          {revoked ? (
            <span class="muted small">
              <Ago iso={d.revoked_at} />
            </span>
          ) : (
            <div class="row nowrap">
              <button type="button" onClick={() => void check.run()} disabled={check.busy} aria-label={`Check ${destinationLabel(d)}`}>
                {check.busy ? 'Checking…' : 'Check'}
              </button>
              <button type="button" class="danger-outline" onClick={onRevoke} aria-label={`Revoke ${destinationLabel(d)}`}>
                Revoke
              </button>
            </div>
          )}
        </td>
      </tr>
      {checked ? (
        <tr class="check-row">
          <td colSpan={8}>
            {check.error ? <ErrorNotice error={check.error} action="The check" /> : null}
            {check.result ? <CheckResult r={check.result} onClose={() => check.clear()} /> : null}
          </td>
        </tr>
      ) : null}
    </>
  );
}

/** What a check found, in words: what the provider answered and, on a failure, what to fix. */
export function CheckResult({ r, onClose }: { r: DestinationCheck; onClose: () => void }) {
  const status = r.http_status === null ? 'no answer' : `HTTP ${r.http_status}`;
  const took = formatDuration(r.latency_ms);
  let title: string;
  let body: string;
  let fix: string | null = null;
  if (r.result === 'pass' && r.mode === 'granted') {
    title = 'Check passed: the provider granted';
    body = `It answered ${status} in ${took} with a valid grant (upload URLs for every file). Robots routed here upload straight to your storage.`;
  } else if (r.result === 'pass') {
    title = 'Check passed: the provider deferred';
    body = `It answered ${status} in ${took} with "not now, ask again later"${r.message ? ` (${r.message})` : ''}. A deferral is a valid answer: robots keep their copy and ask again later.`;
  } else {
    title = `Check failed: ${r.failure ?? 'the answer was refused'}`;
    const what = r.message ? ` (${r.message})` : '';
    switch (r.failure) {
      case 'unreachable':
        body = `Nothing answered at this URL${what}.`;
        fix = 'Check that the provider is running, listens on this host and port, and is reachable from the cloud (a public address; HTTPS with a certificate the cloud trusts).';
        break;
      case 'timeout':
        body = `The provider did not answer within 10 seconds${what}.`;
        fix = 'Check that it is up and not stuck on its storage; it must answer every grant request within 10 s (a deferral is fine when the storage is slow).';
        break;
      case 'http_error':
        body = `The provider answered ${status} instead of a 2xx${what}.`;
        fix =
          r.http_status === 401 || r.http_status === 403
            ? 'It refused the signature: configure it with this destination\'s dsec_ secret (shown once when it was created; if lost, revoke this destination and add a new one).'
            : 'See the provider\'s logs; it must answer every grant request with a 2xx and a grant or a deferral.';
        break;
      case 'invalid_json':
        body = `The provider answered ${status}, but not with JSON${what}.`;
        fix = 'It must answer application/json: a grant or a deferral, as in the grant provider contract (docs/api.md).';
        break;
      case 'schema_invalid':
        body = `The provider answered ${status} with JSON that is not a valid grant${what}.`;
        fix = 'Compare its answer with the grant provider contract (docs/api.md): every manifest file once, complete fields for the protocol, expires_at in the future, a new grant_id each time.';
        break;
      case 'destination_mismatch':
        body = `The grant names another destination than this one${what}.`;
        fix = 'The provider must echo the requested destination_id in its grant; it may be configured for another destination.';
        break;
      default:
        body = `The provider answered ${status} in ${took}${what}.`;
    }
  }
  return (
    <div class={`notice ${r.result === 'pass' ? 'info' : 'error'} check-result`} role="status">
      <div class="row spread">
        <strong>{title}</strong>
        <button type="button" class="link" onClick={onClose}>
          Dismiss
        </button>
      </div>
      <p>{body}</p>
      {fix ? <p>
          <strong>What to fix:</strong> {fix}
        </p> : null}
      <p class="muted small">
        {status}, {took}. A check sends a synthetic signed grant request (one small file, marked as a check); nothing is uploaded or counted.
      </p>
    </div>
  );
}

function CreateDestination({ onCreated, onCancel }: { onCreated: (d: Destination & { secret: string }) => void; onCancel: () => void }) {
  const { session } = useConsole();
  const [url, setUrl] = useState('');
  const [retention, setRetention] = useState<'keep' | 'until_all_verified_plus_72h'>('keep');
  const create = useAction(() => session.client.destinations.create({ type: 'external', url: url.trim(), retention }));
  const urlError = issueAt(create.error, '/url');
  return (
    <form
      class="create-form"
      aria-label="New destination"
      onSubmit={(e) => {
        e.preventDefault();
        void create.run().then((d) => d && onCreated(d));
      }}
    >
      <h3>New destination</h3>
      <Field label="Grant provider URL" id="dest-url" error={urlError} hint="HTTPS, reachable from the cloud at a public address; redirects are not followed.">
        <input
          id="dest-url"
          type="url"
          required
          placeholder="https://grants.example.com/grant"
          value={url}
          onInput={(e) => setUrl(e.currentTarget.value)}
          aria-invalid={urlError ? true : undefined}
          aria-describedby={urlError ? 'dest-url-error dest-url-hint' : 'dest-url-hint'}
        />
      </Field>
      <Field label="Robot's local copy once verified" id="dest-retention">
        <select id="dest-retention" value={retention} onChange={(e) => setRetention(e.currentTarget.value as typeof retention)}>
          {RETENTIONS.map((r) => (
            <option key={r.value} value={r.value}>
              {r.label}
            </option>
          ))}
        </select>
      </Field>
      <p class="muted small">Type: external (a grant provider you run). Upload protocols (single PUT, S3 multipart) are chosen by the provider in each grant.</p>
      <ErrorNotice error={create.error} action="Creating the destination" />
      <div class="row">
        <button type="submit" class="primary" disabled={create.busy || url.trim() === ''}>
          {create.busy ? 'Creating…' : 'Create destination'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
