import { useEffect, useRef } from 'preact/hooks';
import type { DeadLetter } from '@fleet/client';
import { navigate, useLocation } from '../router.js';
import { useConsole } from '../ui/context.js';
import { useAction, useAsync, useTicker } from '../ui/hooks.js';
import { ErrorNotice, Facts, Link, Loading, PageHeader, Pill } from '../ui/components.js';
import { ResourceList, ResourceTable, type Column } from '../ui/resource-page.js';
import { formatDuration, formatTime } from '../ui/format.js';
import { Ago, CursorPager, FeatureMissing, Section, hasFeature } from './admin-shared.js';
import { WebhookStatus } from './webhooks.js';

const PAGE = 25;
const DELIVERY_COLUMNS: readonly Column[] = ['When', 'Event', ['Attempt', 'num'], 'Result', ['Latency', 'num'], ['Event id', 'hide-narrow']];
const DEAD_COLUMNS: readonly Column[] = ['Dead since', 'Event', ['Attempts', 'num'], 'Last answer', 'Payload'];
/** How long a queued test event is watched for on the first page of the log. */
const WATCH_MS = 90_000;

/**
 * One webhook: its subscription, the delivery log (newest first, paged, the cursor in the URL)
 * and its dead letters with redeliver. A test event sent from here (or from the list, `?watch=`)
 * is followed until its first attempt shows in the log.
 */
export function WebhookView({ id }: { id: string }) {
  const { session } = useConsole();
  const client = session.client;
  const loc = useLocation();
  const enabled = hasFeature(session, 'api.access');
  const cursor = loc.query.get('cursor');
  const watch = loc.query.get('watch');
  const hook = useAsync((signal) => (enabled ? client.webhooks.list({ signal }).then((r) => r.webhooks.find((h) => h.id === id) ?? null) : Promise.resolve(null)), [id, enabled]);
  const deliveries = useAsync((signal) => (enabled ? client.webhooks.deliveries(id, { signal, limit: PAGE, ...(cursor ? { cursor } : {}) }) : Promise.resolve(null)), [id, cursor, enabled]);
  const dead = useAsync((signal) => (enabled ? client.webhooks.deadLetters(id, { signal }).then((r) => r.dead_letters) : Promise.resolve(null)), [id, enabled]);
  const test = useAction(() => client.webhooks.test(id));
  const enable = useAction(() => client.webhooks.enable(id));
  const now = useTicker(15_000);

  const setQuery = (changes: Record<string, string | null>) => {
    const q = new URLSearchParams(loc.query);
    for (const [k, v] of Object.entries(changes)) {
      if (v === null) q.delete(k);
      else q.set(k, v);
    }
    const s = q.toString();
    navigate(`/webhooks/${encodeURIComponent(id)}${s ? `?${s}` : ''}`);
  };

  // Follow a queued test event: reload the first page until its attempt is there.
  const rows = deliveries.data?.deliveries ?? [];
  const watched = watch ? rows.find((d) => d.event_id === watch) : undefined;
  const started = useRef({ watch: null as string | null, at: 0 });
  if (started.current.watch !== watch) started.current = { watch, at: Date.now() };
  useEffect(() => {
    if (!watch || watched || cursor) return;
    const t = setInterval(() => {
      if (Date.now() - started.current.at > WATCH_MS) clearInterval(t);
      else {
        deliveries.reload();
        hook.reload();
      }
    }, 1000);
    return () => clearInterval(t);
  }, [watch, watched, cursor]);
  // A watched event that was dead-lettered shows in the dead letters below at once.
  const watchedDead = watched?.outcome === 'dead';
  useEffect(() => {
    if (watchedDead) dead.reload();
  }, [watchedDead]);

  if (!enabled)
    return (
      <>
        <PageHeader title="Webhook" />
        <FeatureMissing feature="api.access" />
      </>
    );
  const h = hook.data;
  return (
    <>
      <PageHeader title="Webhook">
        <Link to="/webhooks">All webhooks</Link>
      </PageHeader>
      <ErrorNotice error={hook.error} action="Loading the webhook" />
      {hook.loading && hook.data === undefined ? <Loading label="Loading the webhook" /> : null}
      {hook.data === null ? (
        <div class="notice warn" role="status">
          No webhook <code>{id}</code> in your organization (it may have been deleted). <Link to="/webhooks">Back to the webhooks</Link>
        </div>
      ) : null}
      {h ? (
        <section class="panel" aria-label="Subscription">
          <p class="hook-url-big mono">{h.url}</p>
          <Facts
            items={[
              ['Status', <WebhookStatus h={h} />],
              ['Events', h.events.join(', ')],
              ['Pending deliveries', h.pending_deliveries.toLocaleString()],
              ['Last delivered', <Ago iso={h.last_delivered_at} now={now} />],
              ['Last delivery error', h.last_delivery_error ? <span class="reason">{h.last_delivery_error}</span> : <span class="muted">none</span>],
              ['Created', formatTime(h.created_at)],
              ['Id', <code>{h.id}</code>],
            ]}
          />
          <div class="row actions-row">
            {h.status === 'disabled' ? (
              <button type="button" class="primary" disabled={enable.busy} onClick={() => void enable.run().then((r) => r && hook.reload())}>
                Enable
              </button>
            ) : null}
            <button
              type="button"
              disabled={test.busy}
              onClick={() =>
                void test.run().then((r) => {
                  if (r) setQuery({ watch: r.event_id, cursor: null });
                })
              }
            >
              {test.busy ? 'Sending…' : 'Send a test event'}
            </button>
            <button type="button" onClick={() => (deliveries.reload(), dead.reload(), hook.reload())}>
              Refresh
            </button>
          </div>
          <ErrorNotice error={test.error} action="Sending the test event" />
          <ErrorNotice error={enable.error} action="Enabling the webhook" />
        </section>
      ) : null}
      {watch ? (
        <div class={`notice ${watched ? (watched.outcome === 'delivered' ? 'info' : 'error') : 'info'}`} role="status" aria-live="polite">
          {!watched ? (
            <>
              Test event <code>{watch}</code> queued; waiting for its delivery…
            </>
          ) : watched.outcome === 'delivered' ? (
            <>
              Test event <code>{watch}</code> delivered: HTTP {watched.status_code} in {formatDuration(watched.latency_ms)}.
            </>
          ) : (
            <>
              Test event <code>{watch}</code> not delivered: {watched.error ?? `HTTP ${watched.status_code}`} ({watched.outcome === 'retry' ? 'it will be retried' : 'dead-lettered'}).
            </>
          )}
        </div>
      ) : null}
      <Section title="Delivery log" id="log-title">
        <p class="muted small">Every attempt, newest first; the newest 500 are kept.</p>
        <ResourceList list={deliveries} count={rows.length} what="delivery log" loading="Loading deliveries" empty={cursor ? 'No more attempts.' : 'No delivery attempted yet. Send a test event to try the endpoint.'}>
          <ResourceTable name="deliveries" columns={DELIVERY_COLUMNS}>
            {rows.map((d) => (
              <tr key={d.id} data-event-id={d.event_id} class={d.event_id === watch ? 'highlight' : ''}>
                <td>
                  <Ago iso={d.at} now={now} />
                </td>
                <td>
                  <code>{d.event}</code>
                </td>
                <td class="num">{d.attempt}</td>
                <td>
                  <Pill tone={d.outcome === 'delivered' ? 'ok' : d.outcome === 'retry' ? 'warn' : 'bad'}>{d.outcome === 'retry' ? 'failed, will retry' : d.outcome === 'dead' ? 'dead-lettered' : 'delivered'}</Pill>{' '}
                  {d.status_code !== null ? <span class="small">HTTP {d.status_code}</span> : null}
                  {d.error ? <div class="small reason">{d.error}</div> : null}
                </td>
                <td class="num">{formatDuration(d.latency_ms)}</td>
                <td class="hide-narrow mono small">{d.event_id}</td>
              </tr>
            ))}
          </ResourceTable>
        </ResourceList>
        <CursorPager cursor={cursor} next={deliveries.data?.cursor} onPage={(c) => setQuery({ cursor: c, watch: null })} label="Delivery log" />
      </Section>
      <DeadLetters id={id} list={dead} onRedelivered={() => (deliveries.reload(), hook.reload())} />
    </>
  );
}

function DeadLetters({ id, list, onRedelivered }: { id: string; list: { data: DeadLetter[] | null | undefined; error: unknown; loading: boolean; reload: () => void }; onRedelivered: () => void }) {
  const { session } = useConsole();
  const redeliver = useAction((deliveryId: string) => session.client.webhooks.redeliver(id, deliveryId));
  const items = list.data ?? [];
  return (
    <Section title="Dead letters" id="dead-title">
      <p class="muted small">Deliveries that failed every retry (or got a status that is not retried). Redeliver puts one back at the end of the queue with the same event id.</p>
      <ResourceList
        list={list}
        count={items.length}
        what="dead letters"
        errors={[[redeliver.error, 'Redelivering']]}
        notices={
          redeliver.result ? (
            <div class="notice info" role="status">
              Event <code>{redeliver.result.event_id}</code> is queued again.
            </div>
          ) : null
        }
        empty="No dead letter."
      >
        <ResourceTable name="dead-letters" columns={DEAD_COLUMNS} actions="Actions">
          {items.map((d) => (
            <tr key={d.id}>
              <td>
                <Ago iso={d.dead_lettered_at} />
              </td>
              <td>
                <code>{d.event}</code>
                <div class="muted small mono">{d.event_id}</div>
              </td>
              <td class="num">{d.attempts}</td>
              <td>
                {d.last_status !== null ? `HTTP ${d.last_status}` : null}
                {d.last_error ? <div class="small reason">{d.last_error}</div> : null}
              </td>
              <td>
                <details>
                  <summary>Show</summary>
                  <pre class="payload">{JSON.stringify(d.payload, null, 2)}</pre>
                </details>
              </td>
              <td>
                <button
                  type="button"
                  disabled={redeliver.busy}
                  onClick={() =>
                    void redeliver.run(d.id).then((r) => {
                      if (r) {
                        list.reload();
                        onRedelivered();
                      }
                    })
                  }
                  aria-label={`Redeliver ${d.event_id}`}
                >
                  Redeliver
                </button>
              </td>
            </tr>
          ))}
        </ResourceTable>
      </ResourceList>
    </Section>
  );
}
