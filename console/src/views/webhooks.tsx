import { useState } from 'preact/hooks';
import type { CreateWebhookRequest, Webhook } from '@fleet/client';
import { useConsole } from '../ui/context.js';
import { useAction, useAsync } from '../ui/hooks.js';
import { Confirm, ErrorNotice, Field, Link, Loading, PageHeader, Pill, SecretOnce } from '../ui/components.js';
import { Ago, FeatureMissing, WEBHOOK_EVENT_INFO, CodeChecks, hasFeature, issueAt } from './admin-shared.js';

const EVENT_OPTIONS = WEBHOOK_EVENT_INFO.map((e) => ({ code: e.event, what: e.what }));

/**
 * Webhook subscriptions: create (the `whsec_` secret shown once), enable a disabled one, rotate
 * the secret, send a test event, delete. The delivery log of each is on its own page.
 */
export function WebhooksView(_props: object) {
  const { session } = useConsole();
  const enabled = hasFeature(session, 'api.access');
  const list = useAsync((signal) => (enabled ? session.client.webhooks.list({ signal }).then((r) => r.webhooks) : Promise.resolve([])), [enabled]);
  const limits = useAsync((signal) => session.client.entitlements({ signal }).then((e) => e.limits), []);
  const [adding, setAdding] = useState(false);
  const [secret, setSecret] = useState<{ label: string; value: string; note: string } | null>(null);
  const [deleting, setDeleting] = useState<Webhook | null>(null);
  const remove = useAction((id: string) => session.client.webhooks.delete(id).then(() => true));
  const hooks = list.data ?? [];
  const active = hooks.filter((h) => h.status === 'active').length;
  const max = limits.data?.webhook_subscriptions;

  return (
    <>
      <PageHeader title="Webhooks">
        {enabled && !adding ? (
          <button type="button" class="primary" onClick={() => (setAdding(true), setSecret(null))}>
            Add a webhook
          </button>
        ) : null}
      </PageHeader>
      {!enabled ? <FeatureMissing feature="api.access" /> : null}
      <p class="muted">
        Episode events pushed to an HTTPS endpoint of yours, signed with the subscription's secret (<code>X-Service-Signature</code>; see docs/api.md, Verifying a
        signature). {max !== undefined ? `${active} of ${max} active subscriptions.` : null}
      </p>
      {secret ? (
        <div>
          <SecretOnce label={secret.label} secret={secret.value} />
          <p class="small">{secret.note}</p>
          <button type="button" onClick={() => setSecret(null)}>
            Done, I have stored it
          </button>
        </div>
      ) : null}
      {adding ? (
        <CreateWebhook
          onCancel={() => setAdding(false)}
          onCreated={(h) => {
            setAdding(false);
            setSecret({ label: `Signing secret of ${h.url}`, value: h.secret, note: 'Your endpoint verifies every delivery\'s signature with it.' });
            list.reload();
          }}
        />
      ) : null}
      <ErrorNotice error={list.error} action="Loading the webhooks" />
      <ErrorNotice error={remove.error} action="Deleting the webhook" />
      {list.loading && list.data === undefined ? <Loading label="Loading webhooks" /> : null}
      {enabled && list.data && hooks.length === 0 && !adding ? <p class="empty panel">No webhook yet. Add one to be told when episodes are reported, synced, verified or fail.</p> : null}
      {hooks.length > 0 ? (
        <div class="table-wrap">
          <table class="webhooks">
            <thead>
              <tr>
                <th scope="col">Endpoint</th>
                <th scope="col">Events</th>
                <th scope="col">Status</th>
                <th scope="col" class="num">
                  Pending
                </th>
                <th scope="col">Last delivery</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {hooks.map((h) => (
                <WebhookRow
                  key={h.id}
                  h={h}
                  onChanged={() => list.reload()}
                  onSecret={(s) => setSecret({ label: `New signing secret of ${h.url}`, value: s.secret, note: `The old secret keeps signing (as a second v1= entry) until ${new Date(s.previous_secret_expires_at).toLocaleString()}: update your endpoint before then.` })}
                  onDelete={() => setDeleting(h)}
                />
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      <Confirm
        open={deleting !== null}
        title="Delete this webhook?"
        confirmLabel="Delete webhook"
        danger
        onCancel={() => setDeleting(null)}
        onConfirm={() => {
          const h = deleting;
          setDeleting(null);
          if (h) void remove.run(h.id).then((ok) => ok && list.reload());
        }}
      >
        {deleting ? (
          <p>
            <code>{deleting.url}</code> gets no more events, and its {deleting.pending_deliveries} pending deliveries and its delivery log are deleted with it.
          </p>
        ) : null}
      </Confirm>
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
        <td>
          <Link to={`/webhooks/${encodeURIComponent(h.id)}`}>
            <span class="hook-url">{h.url}</span>
          </Link>
          <div class="muted small mono">{h.id}</div>
        </td>
        <td>
          <ul class="tags">
            {h.events.map((e) => (
              <li key={e}>
                <code>{e}</code>
              </li>
            ))}
          </ul>
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
  const urlError = issueAt(create.error, '/url');
  const eventsError = issueAt(create.error, '/events');
  return (
    <form
      class="create-form panel"
      aria-label="New webhook"
      onSubmit={(e) => {
        e.preventDefault();
        void create.run().then((h) => h && onCreated(h));
      }}
    >
      <h2>New webhook</h2>
      <Field label="Endpoint URL" id="hook-url" error={urlError} hint="HTTPS, at a public address; redirects are not followed.">
        <input
          id="hook-url"
          type="url"
          required
          placeholder="https://example.com/fleet-events"
          value={url}
          onInput={(e) => setUrl(e.currentTarget.value)}
          aria-invalid={urlError ? true : undefined}
          aria-describedby="hook-url-hint"
        />
      </Field>
      <CodeChecks legend="Events" name="events" options={EVENT_OPTIONS} chosen={events} onChange={setEvents} error={eventsError} />
      <ErrorNotice error={create.error} action="Creating the webhook" />
      <div class="row">
        <button type="submit" class="primary" disabled={create.busy || url.trim() === '' || events.size === 0}>
          {create.busy ? 'Creating…' : 'Create webhook'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
