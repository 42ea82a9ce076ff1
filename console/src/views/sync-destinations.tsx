import { useState } from 'preact/hooks';
import type { Destination, DestinationCheck } from '@fleet/client';
import { needs } from '../session.js';
import { useConsole } from '../ui/context.js';
import { useAction, type Async } from '../ui/hooks.js';
import { ErrorNotice, Pill, ScopedButton } from '../ui/components.js';
import { formatDuration } from '../ui/format.js';
import { ConfirmAction, CreateForm, ResourceList, NameCell, ResourceTable, SecretPanel, SelectField, ShowHidden, UrlField, fieldIssue, useCreateFlow, useDestructive, type Column } from '../ui/resource-page.js';
import { Ago, Section } from './admin-shared.js';

const RETENTIONS: { value: 'keep' | 'until_all_verified_plus_72h'; label: string }[] = [
  { value: 'keep', label: 'Keep the robot\'s copy (default)' },
  { value: 'until_all_verified_plus_72h', label: 'Delete it 72 h after every destination verified it' },
];

const COLUMNS: readonly Column[] = ['Grant provider', 'Status', 'Last forward', ['Forwards 24 h', 'num'], ['Deferrals 24 h', 'num'], 'Last deferral', ['Retention', 'hide-narrow']];

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
  const flow = useCreateFlow(list.reload);
  const revoke = useDestructive(
    (d: Destination) => session.client.destinations.revoke(d.id),
    () => list.reload(),
  );

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
        flow.adding ? null : (
          <ScopedButton allowed={admin} why={needs('admin')} class="primary" onClick={flow.start}>
            Add a destination
          </ScopedButton>
        )
      }
    >
      <p class="muted small">
        A destination is a grant provider of yours: for each episode the cloud asks it, signed with the destination's secret, for upload URLs; the robot then uploads
        straight to your storage.
      </p>
      <SecretPanel flow={flow}>
        {() => (
          <p class="small">
            Give it to your grant provider (for <code>fleet-sim grant-provider</code>: <code>FLEET_PROVIDER_SECRET</code>): it verifies the signature of every grant
            request with it. Then use <strong>Check</strong> to see what a robot would get.
          </p>
        )}
      </SecretPanel>
      {flow.adding ? (
        <CreateDestination
          onCancel={flow.cancel}
          onCreated={(d) => flow.created({ label: `Secret of the destination ${destinationLabel(d)} (${d.id})`, value: d.secret })}
        />
      ) : null}
      <ResourceList
        list={list}
        count={shown.length}
        what="destinations"
        polled
        errors={[[revoke.error, 'Revoking the destination']]}
        empty={all.length === 0 ? 'No destination yet: recordings stay on the robots until you add one.' : 'Every destination is revoked: recordings stay on the robots until you add one.'}
      >
        <ResourceTable name="destinations" columns={COLUMNS} actions="Actions">
          {shown.map((d) => (
            <DestinationRow key={d.id} d={d} onRevoke={() => revoke.ask(d)} />
          ))}
        </ResourceTable>
      </ResourceList>
      <ShowHidden count={revokedCount} checked={showRevoked} onChange={onShowRevoked}>
        Show revoked destinations
      </ShowHidden>
      <ConfirmAction action={revoke} title="Revoke this destination?" confirmLabel="Revoke" danger>
        {(d) => (
          <p>
            <code>{d.url}</code> gets no grant request from now on. Data already synced stays where it is; routing rules pointing at it stop matching, and
            episodes routed to it that had not synced are routed again. This cannot be undone.
          </p>
        )}
      </ConfirmAction>
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
        <NameCell id={d.id}>
          <span class="dest-url" title={d.url}>
            {destinationLabel(d)}
          </span>
        </NameCell>
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
  return (
    <CreateForm title="New destination" inSection create={create} onCreated={onCreated} onCancel={onCancel} failed="Creating the destination" submitLabel="Create destination" ready={url.trim() !== ''}>
      <UrlField
        label="Grant provider URL"
        id="dest-url"
        hint="HTTPS, reachable from the cloud at a public address; redirects are not followed."
        placeholder="https://grants.example.com/grant"
        value={url}
        onInput={setUrl}
        error={fieldIssue(create.error, '/url')}
        describeError
      />
      <SelectField label="Robot's local copy once verified" id="dest-retention" value={retention} options={RETENTIONS} onChange={setRetention} />
      <p class="muted small">Type: external (a grant provider you run). Upload protocols (single PUT, S3 multipart) are chosen by the provider in each grant.</p>
    </CreateForm>
  );
}
