import { useEffect } from 'preact/hooks';
import { can } from '../session.js';
import { useLiveEvent, useLiveState, useConsole } from '../ui/context.js';
import { replaceQuery, useLocation } from '../router.js';
import { useAsync } from '../ui/hooks.js';
import { PageHeader } from '../ui/components.js';
import { FeatureMissing, hasFeature, useThrottled } from './admin-shared.js';
import { Destinations } from './sync-destinations.js';
import { RoutingRules } from './sync-rules.js';
import { SyncHealth } from './sync-health.js';

/** Replica states change on their own: these events move the health numbers. */
const LIVE_TYPES = ['episode.finalized', 'episode.synced', 'episode.verified', 'episode.failed'] as const;
/** At most one refresh per this many ms, however many events arrive. */
const REFRESH_MS = 2000;
/** Without the live stream, the page polls this often instead. */
const POLL_MS = 20_000;
/** Robot names are looked up for at most this many robots (pages of 100). */
const NAME_PAGES = 10;

/**
 * Sync: destinations with their health, routing rules in order, and per-robot sync health.
 * Reading the health needs data:read; destinations and rules are admin-only in the API, so a
 * data:read key sees the health and a word about the rest (no 403 just for opening the page).
 */
export function SyncView(_props: object) {
  const { session } = useConsole();
  const loc = useLocation();
  const client = session.client;
  const admin = can(session, 'admin');
  const enabled = hasFeature(session, 'data.metadata');
  const readsRobots = can(session, ['robots:read', 'fleet:read']) && hasFeature(session, 'api.access');

  const destinations = useAsync((signal) => (admin && enabled ? client.destinations.list({ signal }).then((r) => r.destinations) : Promise.resolve(null)), [admin, enabled]);
  const rules = useAsync((signal) => (admin && enabled ? client.routingRules.list({ signal }).then((r) => r.routing_rules) : Promise.resolve(null)), [admin, enabled]);
  const health = useAsync((signal) => (enabled ? client.syncHealth({ signal }).then((r) => r.robots) : Promise.resolve(null)), [enabled]);
  const names = useAsync(
    async (signal) => {
      const m = new Map<string, string>();
      if (!readsRobots) return m;
      let cursor: string | undefined;
      for (let i = 0; i < NAME_PAGES; i++) {
        const page = await client.robots.list({ limit: 100, includeDeenrolled: true, signal, ...(cursor ? { cursor } : {}) });
        for (const r of page.robots) m.set(r.id, r.name);
        if (!page.cursor) break;
        cursor = page.cursor;
      }
      return m;
    },
    [readsRobots],
  );

  const refresh = useThrottled(() => {
    health.reload();
    if (admin) destinations.reload();
  }, REFRESH_MS);
  useLiveEvent(LIVE_TYPES, refresh);
  const liveState = useLiveState();
  useEffect(() => {
    if (liveState === 'live' || !enabled) return;
    const t = setInterval(refresh, POLL_MS);
    return () => clearInterval(t);
  }, [liveState, enabled]);

  const setQuery = (changes: Record<string, string | null>) => {
    const q = new URLSearchParams(loc.query);
    for (const [k, v] of Object.entries(changes)) {
      if (v === null || v === '') q.delete(k);
      else q.set(k, v);
    }
    replaceQuery(q);
  };

  return (
    <>
      <PageHeader title="Sync" />
      {!enabled ? (
        <FeatureMissing feature="data.metadata" />
      ) : (
        <>
          <Destinations admin={admin} list={destinations} showRevoked={loc.query.get('revoked') === '1'} onShowRevoked={(v) => setQuery({ revoked: v ? '1' : null })} />
          <RoutingRules admin={admin} list={rules} destinations={destinations.data ?? undefined} />
          <SyncHealth
            health={health}
            names={names.data ?? new Map()}
            filter={loc.query.get('robot') ?? ''}
            backlogOnly={loc.query.get('backlog') === '1'}
            onFilter={(robot, backlog) => setQuery({ robot, backlog: backlog ? '1' : null })}
          />
        </>
      )}
    </>
  );
}
