/**
 * The invariants the soak checks once the system has drained, each with how many things it
 * looked at and what broke it. Everything is read from the outside: the robots' own SQLite, the
 * cloud's API, the bucket, and what the webhook receivers got.
 */
import { createHash } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { cloudLogFiveHundreds, memoryBounds, splitByOutage, type ApiLog, type MemoryWatch, type Window } from './watch.js';
import type { LocalEpisode, RobotState } from './robot-state.js';
import { FleetClient } from '@fleet/client';
import { WEBHOOK_EVENTS } from '@fleet/protocol';
import { ROUTING, type OrgName, type SoakSystem } from './system.js';

export interface Invariant {
  name: string;
  /** How many things were checked. */
  count: number;
  violations: string[];
}

export interface CloudReplica {
  destination_id: string;
  state: string;
  error: string | null;
  object_key?: string;
}

export interface CloudEpisode {
  id: string;
  robot_id: string;
  outcome: string;
  replicas: CloudReplica[];
}

/** Every episode of the organization through every page of GET /v1/episodes. */
export async function listCloudEpisodes(sys: SoakSystem, org: OrgName): Promise<CloudEpisode[]> {
  const out: CloudEpisode[] = [];
  let cursor: string | null = null;
  do {
    const q: string = cursor === null ? 'limit=100' : `limit=100&cursor=${encodeURIComponent(cursor)}`;
    const page: { episodes: CloudEpisode[]; cursor: string | null } = await sys.api.json(sys, 'GET', `/v1/episodes?${q}`, sys.orgs[org].key);
    out.push(...page.episodes);
    cursor = page.cursor;
  } while (cursor !== null);
  return out;
}

/** The robot states with the organization each robot belongs to. */
export interface RobotOf {
  org: OrgName;
  state: RobotState;
}

/**
 * The position in the organization's event log of each of its episode events, read through the
 * event stream from its start (`evt_0`) until every id in `want` has come, or for at most two
 * minutes (the drained log is replayed in seconds; an id that never comes is a violation).
 */
async function logOrder(sys: SoakSystem, org: OrgName, want: ReadonlySet<string>): Promise<Map<string, number>> {
  const order = new Map<string, number>();
  let missing = want.size;
  if (missing === 0) return order;
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), 120_000);
  try {
    const client = new FleetClient({ baseUrl: sys.cloud().http, apiKey: sys.orgs[org].key });
    for await (const e of client.events.stream({ lastEventId: 'evt_0', types: [...WEBHOOK_EVENTS], signal: ac.signal })) {
      if (order.has(e.id)) continue;
      order.set(e.id, order.size);
      if (want.has(e.id) && --missing === 0) break;
    }
  } finally {
    clearTimeout(timer);
    ac.abort();
  }
  return order;
}

const limitList = (xs: string[], n = 20): string[] => (xs.length > n ? [...xs.slice(0, n), `… and ${xs.length - n} more`] : xs);

export function routedTo(org: OrgName, e: LocalEpisode): boolean {
  return ROUTING[org].routes({ outcome: e.outcome, task_id: e.taskId });
}

export async function checkInvariants(opts: {
  sys: SoakSystem;
  robots: readonly RobotOf[];
  cloud: Record<OrgName, CloudEpisode[]>;
  api: ApiLog;
  memory: MemoryWatch;
  /** The PostgreSQL outages (down to up, plus a grace for pools to reconnect). */
  outages: readonly Window[];
}): Promise<{ invariants: Invariant[]; outageFiveHundreds: string[] }> {
  const { sys, robots, cloud, api, memory, outages } = opts;
  const out: Invariant[] = [];
  const local = robots.flatMap((r) => r.state.episodes.map((e) => ({ org: r.org, e, state: r.state })));
  const counts: Record<OrgName, Map<string, number>> = { A: new Map(), B: new Map() };
  const byId: Record<OrgName, Map<string, CloudEpisode>> = { A: new Map(), B: new Map() };
  for (const org of ['A', 'B'] as const) {
    for (const e of cloud[org]) {
      counts[org].set(e.id, (counts[org].get(e.id) ?? 0) + 1);
      byId[org].set(e.id, e);
    }
  }

  // 1. Every finalized episode indexed exactly once, in its own organization only.
  {
    const v: string[] = [];
    const known = new Set(local.map((l) => l.e.id));
    for (const { org, e } of local) {
      const n = counts[org].get(e.id) ?? 0;
      const other = counts[org === 'A' ? 'B' : 'A'].get(e.id) ?? 0;
      if (n !== 1) v.push(`${e.id} (robot ${e.robotId}, org ${org}, ${e.outcome}${e.interrupted ? ', interrupted' : ''}) indexed ${n} times`);
      if (other !== 0) v.push(`${e.id} of org ${org} listed in the other organization`);
    }
    for (const org of ['A', 'B'] as const) for (const id of counts[org].keys()) if (!known.has(id)) v.push(`${id} indexed in org ${org} but finalized by no robot`);
    out.push({ name: 'every finalized episode indexed exactly once (local episode lists vs GET /v1/episodes)', count: local.length, violations: limitList(v) });
  }

  // 2. Every routed episode verified at its destination; every object in the bucket matches its manifest.
  const routed = local.filter((l) => routedTo(l.org, l.e));
  {
    const v: string[] = [];
    for (const { org, e } of routed) {
      const rep = byId[org].get(e.id)?.replicas.find((r) => r.destination_id === sys.orgs[org].destinationId);
      if (rep?.state !== 'verified') v.push(`${e.id} (org ${org}) at ${sys.orgs[org].destinationId}: ${rep ? `${rep.state}${rep.error ? ` (${rep.error})` : ''}` : 'no replica'}`);
    }
    out.push({ name: 'every routed episode verified at its destination', count: routed.length, violations: limitList(v) });
  }
  {
    const v: string[] = [];
    const expected = new Map<string, { sha256: string; size: number }>();
    for (const { org, e } of local) {
      const rep = byId[org].get(e.id)?.replicas.find((r) => r.destination_id === sys.orgs[org].destinationId);
      if (!rep?.object_key) continue;
      for (const f of e.manifest.files) expected.set(`${rep.object_key}${f.path}`, { sha256: f.sha256, size: f.size_bytes });
    }
    let objects: Awaited<ReturnType<SoakSystem['s3']['listObjects']>> = [];
    try {
      objects = await retried(() => sys.s3.listObjects());
    } catch (err) {
      const cause = sys.s3.process.stderrLines.filter((l) => l.trim() !== '').slice(-6).join(' | ');
      v.push(`the store could not list the bucket (${err instanceof Error ? err.message : String(err)})${cause ? `; the S3 server said: ${cause}` : ''}`);
    }
    for (const o of objects) {
      const want = expected.get(o.key);
      if (!want) {
        v.push(`${o.key}: in the bucket, in no manifest`);
        continue;
      }
      // A read the test store fails (s3rver answers InternalError for an object whose files a
      // kill -9 left half written) is tried again, then reported as what it is: no crash.
      let got: Awaited<ReturnType<typeof sys.s3.getObject>>;
      try {
        got = await retried(() => sys.s3.getObject(o.key));
      } catch (err) {
        v.push(`${o.key}: the store could not read it back (${err instanceof Error ? err.message : String(err)})`);
        continue;
      }
      const sha = got ? createHash('sha256').update(got.body).digest('hex') : null;
      if (sha !== want.sha256 || got?.body.length !== want.size) v.push(`${o.key}: ${got?.body.length ?? 'missing'} bytes sha256 ${sha ?? '-'}, manifest ${want.size} bytes ${want.sha256}`);
    }
    // A verified replica's files are all there.
    const present = new Set(objects.map((o) => o.key));
    for (const { org, e } of routed) {
      const rep = byId[org].get(e.id)?.replicas.find((r) => r.destination_id === sys.orgs[org].destinationId);
      if (rep?.state !== 'verified' || !rep.object_key) continue;
      for (const f of e.manifest.files) if (!present.has(`${rep.object_key}${f.path}`)) v.push(`${rep.object_key}${f.path}: verified, not in the bucket`);
    }
    out.push({ name: 'every object in the bucket byte-identical to its manifest (sha256)', count: objects.length, violations: limitList(v) });
  }

  // 3. No local copy pruned before every destination verified it; unverified files still on disk.
  {
    const v: string[] = [];
    let checked = 0;
    for (const { org, e, state } of local) {
      if (e.outcome === 'discarded') continue;
      checked++;
      const reps = state.replicas.filter((r) => r.episodeId === e.id);
      const cloudRep = byId[org].get(e.id)?.replicas ?? [];
      if (e.prunedAt !== null) {
        const early = reps.filter((r) => r.verifiedAt === null || r.verifiedAt + 72 * 3600_000 > e.prunedAt!);
        if (early.length > 0 || cloudRep.some((r) => r.state !== 'verified')) v.push(`${e.id} pruned at ${new Date(e.prunedAt).toISOString()} before every destination verified it`);
        continue;
      }
      if (e.localMissingAt !== null) v.push(`${e.id}: local files missing (local_missing_at ${new Date(e.localMissingAt).toISOString()})`);
      for (const f of e.manifest.files) {
        const ok = await stat(join(e.dir, ...f.path.split('/'))).then(
          (s) => s.size === f.size_bytes,
          () => false,
        );
        if (!ok) v.push(`${e.id}: ${f.path} gone or changed on the robot while not pruned`);
      }
    }
    const pruned = local.filter((l) => l.e.prunedAt !== null).length;
    out.push({ name: `no local copy pruned before every destination verified it (${pruned} pruned; the rest checked on disk)`, count: checked, violations: limitList(v) });
  }

  // 4. Webhooks: every event delivered at least once, in order per subscription, to no other organization.
  {
    const v: string[] = [];
    let expectedEvents = 0;
    for (const org of ['A', 'B'] as const) {
      const o = sys.orgs[org];
      const seen = new Set(o.deliveries.map((d) => `${d.event} ${String(d.body.episode_id)} ${typeof d.body.destination_id === 'string' ? d.body.destination_id : ''}`));
      for (const e of cloud[org]) {
        const want = [`episode.finalized ${e.id} `];
        for (const r of e.replicas) if (r.state === 'verified') want.push(`episode.synced ${e.id} ${r.destination_id}`, `episode.verified ${e.id} ${r.destination_id}`);
        for (const w of want) {
          expectedEvents++;
          if (!seen.has(w)) v.push(`org ${org}: ${w.trim()} never delivered`);
        }
      }
      // Order: first arrivals come in the order of the organization's event log (ids are opaque:
      // the log's order is read back through the event stream, replayed from its start), and
      // every delivered id is one of this organization's events.
      const firsts = [...new Set(o.deliveries.map((d) => d.eventId))];
      const position = await logOrder(sys, org, new Set(firsts));
      let last = -1;
      let lastId = '';
      for (const id of firsts) {
        const at = position.get(id);
        if (at === undefined) v.push(`org ${org}: delivered ${id}, which is not in the organization's event log`);
        else if (at < last) v.push(`org ${org}: ${id} arrived after ${lastId}, which the log has later`);
        else [last, lastId] = [at, id];
      }
      // Isolation: every delivery is about this organization's robots and episodes.
      const robotsOfOrg = new Set(robots.filter((r) => r.org === org).flatMap((r) => r.state.episodes.map((e) => e.robotId)));
      const groupsOfOrg = sys.groups.filter((g) => g.org === org).flatMap((g) => g.robotIds);
      for (const id of groupsOfOrg) robotsOfOrg.add(id);
      for (const d of o.deliveries) {
        const episodeId = String(d.body.episode_id);
        if (!robotsOfOrg.has(String(d.body.robot_id)) || byId[org === 'A' ? 'B' : 'A'].has(episodeId)) v.push(`org ${org} got ${d.event} of ${episodeId} (robot ${String(d.body.robot_id)}) of another organization`);
      }
    }
    const delivered = sys.orgs.A.deliveries.length + sys.orgs.B.deliveries.length;
    out.push({ name: `every webhook event delivered at least once, in order per subscription, to no other organization (${delivered} deliveries)`, count: expectedEvents, violations: limitList(v) });
  }

  // 5. Every routed replica not verified says why.
  {
    const v: string[] = [];
    let unverified = 0;
    for (const { org, e, state } of routed) {
      const dest = sys.orgs[org].destinationId;
      const rep = byId[org].get(e.id)?.replicas.find((r) => r.destination_id === dest);
      if (rep?.state === 'verified') continue;
      unverified++;
      const mine = state.replicas.find((r) => r.episodeId === e.id && r.destinationId === dest);
      const why = rep?.error ?? mine?.lastError ?? mine?.note ?? null;
      if (!why) v.push(`${e.id} (org ${org}): ${rep?.state ?? 'no replica'} at ${dest} and no reason, cloud or robot`);
    }
    out.push({ name: 'every replica not verified says why (failure reason)', count: unverified, violations: limitList(v) });
  }

  // 6. No 5xx but the contract's; memory within bounds.
  out.push({ name: 'no process exited but those a fault stopped', count: sys.replicas.clouds.length + sys.groups.reduce((n, g) => n + g.processes.length, 0) + sys.providers.length + 2, violations: sys.unexpectedExits });
  const outageFiveHundreds: string[] = [];
  {
    const logs = cloudLogFiveHundreds(sys.replicas.clouds, outages);
    const own = splitByOutage(api.violations, outages);
    const show = (c: (typeof own.violations)[number]) => `soak call ${c.method} ${c.path}: ${c.status} ${c.code ?? ''} at ${new Date(c.at).toISOString()}`;
    outageFiveHundreds.push(...own.duringOutage.map(show), ...logs.duringOutage);
    const v = [...own.violations.map(show), ...logs.violations, ...outageFiveHundreds];
    const calls = [...api.statuses.values()].reduce((a, b) => a + b, 0);
    out.push({ name: `no 5xx outside the contract (${calls} soak calls, ${logs.total} 5xx in cloud logs)`, count: calls, violations: limitList(v) });
  }
  {
    const bulk = Math.max(1, ...sys.groups.map((g) => g.count));
    const bounds = memoryBounds(bulk);
    const v: string[] = [];
    for (const [label, p] of memory.peaks) {
      const bound = bounds[p.kind];
      if (bound !== undefined && p.peak > bound) v.push(`${label}: peak ${mib(p.peak)} over the bound ${mib(bound)}`);
    }
    out.push({ name: 'every process within its memory bound', count: memory.peaks.size, violations: v });
  }
  return { invariants: out, outageFiveHundreds };
}

export const mib = (n: number): string => `${(n / 1024 / 1024).toFixed(0)} MiB`;

/** A read of the soak's bucket, tried up to three times a second apart (the store may just be back). */
async function retried<T>(read: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await read();
    } catch (err) {
      if (attempt >= 3) throw err;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}
