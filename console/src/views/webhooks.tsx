import { useState } from 'preact/hooks';
import type { CreateWebhookRequest, Webhook } from '@fleet/client';
import { useConsole } from '../ui/context.js';
import { useAction, useAsync } from '../ui/hooks.js';
import { Confirm, ErrorNotice, Link, Pill } from '../ui/components.js';
import { CodeTags, ConfirmAction, CreateForm, NameCell, ResourceHeader, ResourceList, ResourceTable, SecretPanel, UrlField, fieldIssue, useCreateFlow, useDestructive, type Column, type Secret } from '../ui/resource-page.js';
import { Ago, FeatureMissing, WEBHOOK_EVENT_INFO, CodeChecks, hasFeature } from './admin-shared.js';

const EVENT_OPTIONS = WEBHOOK_EVENT_INFO.map((e) => ({ code: e.event, what: e.what }));
const COLUMNS: readonly Column[] = ['Endpoint', 'Events', 'Status', ['Pending', 'num'], 'Last delivery'];

/**
 * Webhook subscriptions: create (the `whsec_` secret shown once), enable a disabled one, rotate
 * the secret, send a test event, delete. The delivery log of each is on its own page.
 */
export function WebhooksView(_props: object) {
  const { session } = useConsole();
  const enabled = hasFeature(session, 'api.access');
  const list = useAsync((signal) => (enabled ? session.client.webhooks.list({ signal }).then((r) => r.webhooks) : Promise.resolve([])), [enabled]);
  const limits = useAsync((signal) => session.client.entitlements({ signal }).then((e) => e.limits), []);
  const flow = useCreateFlow<Secret & { note: string }>(list.reload);
  const remove = useDestructive(
    (h: Webhook) => session.client.webhooks.delete(h.id),
    () => list.reload(),
  );
  const hooks = list.data ?? [];
  const active = hooks.filter((h) => h.status === 'active').length;
  const max = limits.data?.webhook_subscriptions;

  return (
    <>
      <ResourceHeader title="Webhooks" createLabel="Add a webhook" flow={flow} enabled={enabled} notice={<FeatureMissing feature="api.access" />} />
      <p class="muted">
        Episode events pushed to an HTTPS endpoint of yours, signed with the subscription's secret (<code>X-Service-Signature</code>; see docs/api.md, Verifying a
        signature). {max !== undefined ? `${active} of ${max} active subscriptions.` : null}
      </p>
      <SecretPanel flow={flow}>{(s) => <p class="small">{s.note}</p>}</SecretPanel>
      {flow.adding ? (
        <CreateWebhook
          onCancel={flow.cancel}
          onCreated={(h) => flow.created({ label: `Signing secret of ${h.url}`, value: h.secret, note: 'Your endpoint verifies every delivery\'s signature with it.' })}
        />
      ) : null}
      <ResourceList
        list={list}
        count={hooks.length}
        what="webhooks"
        errors={[[remove.error, 'Deleting the webhook']]}
        empty={enabled && !flow.adding ? 'No webhook yet. Add one to be told when episodes are reported, synced, verified or fail.' : null}
        panel
      >
        <ResourceTable name="webhooks" columns={COLUMNS} actions="Actions">
          {hooks.map((h) => (
            <WebhookRow
              key={h.id}
              h={h}
              onChanged={() => list.reload()}
              onSecret={(s) => flow.show({ label: `New signing secret of ${h.url}`, value: s.secret, note: `The old secret keeps signing (as a second v1= entry) until ${new Date(s.previous_secret_expires_at).toLocaleString()}: update your endpoint before then.` })}
              onDelete={() => remove.ask(h)}
            />
          ))}
        </ResourceTable>
      </ResourceList>
      <ConfirmAction action={remove} title="Delete this webhook?" confirmLabel="Delete webhook" danger>
        {(h) => (
          <p>
            <code>{h.url}</code> gets no more events, and its {h.pending_deliveries} pending deliveries and its delivery log are deleted with it.
          </p>
        )}
      </ConfirmAction>
    </>
  );
}

export function WebhookStatus({ h }: { h: Webhook }) {
  if (h.status === 'active') return <Pill tone="ok">active</Pill>;
  return (
    <>
      <Pill tone="bad">disabled</Pill>
      {h.disabled_reason ? <div class="small reason">{h.disabled_reason}</div> : null}
    </>
  );
}

function WebhookRow({ h, onChanged, onSecret, onDelete }: { h: Webhook; onChanged: () => void; onSecret: (s: { secret: string; previous_secret_expires_at: string }) => void; onDelete: () => void }) {
  const { session } = useConsole();
  const test = useAction(() => session.client.webhooks.test(h.id));
  const enable = useAction(() => session.client.webhooks.enable(h.id));
  const rotate = useAction(() => session.client.webhooks.rotateSecret(h.id));
  const [confirmRotate, setConfirmRotate] = useState(false);
  const err = test.error ?? enable.error ?? rotate.error;
  return (
    <>
      <tr data-webhook-id={h.id}>
        <NameCell id={h.id}>
          <Link to={`/webhooks/${encodeURIComponent(h.id)}`}>
            <span class="hook-url">{h.url}</span>
          </Link>
        </NameCell>
        <td>
          <CodeTags codes={h.events} />
        </td>
        <td>
          <WebhookStatus h={h} />
        </td>
        <td class="num">{h.pending_deliveries.toLocaleString()}</td>
        <td>
          <Ago iso={h.last_delivered_at} />
          {h.last_delivery_error ? <div class="small reason bad-text">{h.last_delivery_error}</div> : null}
        </td>
        <td class="actions">
          <div class="row nowrap">
            {h.status === 'disabled' ? (
              <button type="button" class="primary" disabled={enable.busy} onClick={() => void enable.run().then((r) => r && onChanged())} aria-label={`Enable ${h.url}`}>
                Enable
              </button>
            ) : null}
            <Link to={`/webhooks/${encodeURIComponent(h.id)}`} class="button" aria-label={`Deliveries of ${h.url}`}>
              Deliveries
            </Link>
            <button type="button" disabled={test.busy} onClick={() => void test.run()} aria-label={`Send test to ${h.url}`}>
              Send test
            </button>
            <button type="button" disabled={rotate.busy} onClick={() => setConfirmRotate(true)} aria-label={`Rotate secret of ${h.url}`}>
              Rotate secret
            </button>
            <button type="button" class="danger-outline" onClick={onDelete} aria-label={`Delete ${h.url}`}>
              Delete
            </button>
          </div>
        </td>
      </tr>
      {err || test.result || enable.result ? (
        <tr class="check-row">
          <td colSpan={6}>
            <ErrorNotice error={test.error} action="Sending the test event" />
            <ErrorNotice error={enable.error} action="Enabling the webhook" />
            <ErrorNotice error={rotate.error} action="Rotating the secret" />
            {test.result ? (
              <div class="notice info" role="status">
                Test event <code>{test.result.event_id}</code> queued (an <code>episode.finalized</code> with <code>test: true</code>).{' '}
                <Link to={`/webhooks/${encodeURIComponent(h.id)}?watch=${encodeURIComponent(test.result.event_id)}`}>See its delivery</Link>
              </div>
            ) : null}
            {enable.result ? (
              <div class="notice info" role="status">
                Enabled: pending deliveries resume.
              </div>
            ) : null}
          </td>
        </tr>
      ) : null}
      <Confirm
        open={confirmRotate}
        title="Rotate the signing secret?"
        confirmLabel="Rotate secret"
        onCancel={() => setConfirmRotate(false)}
        onConfirm={() => {
          setConfirmRotate(false);
          void rotate.run().then((r) => r && onSecret(r));
        }}
      >
        <p>
          A new secret signs every delivery to <code>{h.url}</code> from now on; the old one keeps signing alongside it for 24 hours, so your endpoint has time to switch.
        </p>
      </Confirm>
    </>
  );
}

function CreateWebhook({ onCreated, onCancel }: { onCreated: (h: Webhook & { secret: string }) => void; onCancel: () => void }) {
  const { session } = useConsole();
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState<Set<string>>(new Set(['episode.finalized', 'episode.verified', 'episode.failed']));
  const create = useAction(() => session.client.webhooks.create({ url: url.trim(), events: WEBHOOK_EVENT_INFO.map((e) => e.event).filter((e) => events.has(e)) as CreateWebhookRequest['events'] }));
  const urlError = fieldIssue(create.error, '/url');
  const eventsError = fieldIssue(create.error, '/events');
  return (
    <CreateForm title="New webhook" create={create} onCreated={onCreated} onCancel={onCancel} failed="Creating the webhook" submitLabel="Create webhook" ready={url.trim() !== '' && events.size > 0}>
      <UrlField label="Endpoint URL" id="hook-url" hint="HTTPS, at a public address; redirects are not followed." placeholder="https://example.com/fleet-events" value={url} onInput={setUrl} error={urlError} />
      <CodeChecks legend="Events" name="events" options={EVENT_OPTIONS} chosen={events} onChange={setEvents} error={eventsError} />
    </CreateForm>
  );
}
