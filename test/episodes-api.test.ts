import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { EpisodeSchema, EpisodeWithLocationsSchema, OutcomeChangeSchema, type Episode, type EpisodeWithLocations, type Segment } from '@fleet/protocol';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startCloud, type CloudProcess } from './support/cloud.js';
import { AGENT_ARGS, agentControl, episodeFiles, getEpisode, getSegments, listEpisodes, waitIdle } from './support/episodes.js';
import { runAgentCli, sendCommand, startAgentProcess, startFleet, type FleetProcess } from './support/robots.js';
import { waitFor } from './support/wait.js';

/**
 * The episode index through /v1 against one real cloud, fed by real simulated robots:
 *
 * - fleet A (2 robots, no --auto-episodes): the operators set their task context and step through
 *   subtasks while a recording runs; robot 0 records through `POST /v1/robots/{id}/episodes/…`,
 *   robot 1 through its local control socket (`fleet-agent episode … --data-dir <fleet>/robot-1`);
 * - fleet B (2 robots, --auto-episodes): the operators start and end episodes themselves, which
 *   also keeps new episodes arriving while the pagination test walks the index;
 * - a standalone agent with its own context (autonomous, an eval, another policy version) that is
 *   killed with SIGKILL mid-recording: its next start finalizes the episode as interrupted, the
 *   one real way an episode gets a recorded `metadata` layer.
 *
 * Tests run in order and build on each other's rows (one cloud for the file keeps it fast).
 */

/** Every field of the spec's Episode table. */
const EPISODE_KEYS = [
  'annotations',
  'bag_size_bytes',
  'bag_uri',
  'control_mode',
  'duration_s',
  'ended_at',
  'episode_seq',
  'eval_id',
  'id',
  'message_count',
  'metadata',
  'operator_id',
  'operator_name',
  'outcome',
  'policy_version_id',
  'recorded_outcome',
  'recording_session_id',
  'replicas',
  'reported_at',
  'robot_id',
  'session_name',
  'started_at',
  'subtask_id',
  'task_id',
  'task_name',
];

/** Recorded facts the agent writes into episode.json and the index must keep as they are. */
const RECORDED_FACTS = [
  'id',
  'robot_id',
  'recording_session_id',
  'episode_seq',
  'session_name',
  'task_id',
  'task_name',
  'subtask_id',
  'operator_id',
  'operator_name',
  'control_mode',
  'policy_version_id',
  'eval_id',
  'started_at',
  'ended_at',
  'duration_s',
  'message_count',
  'bag_size_bytes',
  'metadata',
] as const;

/** The simulator's tasks (simulator/src/fleet.ts) and the subtasks its operator steps through. */
const SIM_SUBTASKS: Record<string, string[]> = {
  task_pick_place: ['reach', 'grasp', 'place'],
  task_fold_towel: ['flatten', 'fold_half', 'fold_quarter', 'stack'],
  task_stack_cubes: ['pick_red', 'stack_red'],
};

const EQ_FILTERS = ['robot_id', 'task_id', 'subtask_id', 'operator_id', 'control_mode', 'policy_version_id', 'eval_id', 'outcome'] as const;

const SIM_ARGS = ['--bytes-per-second', '4096'];

let cloud: CloudProcess;
/** Operators step through subtasks; recordings start through /v1 (robot 0) or the control socket (robot 1). */
let fleetA: FleetProcess;
/** Operators start their own episodes. */
let fleetB: FleetProcess;
const disposables: AsyncDisposable[] = [];
/** Robot id to its data directory, to read what the agent wrote on disk. */
const robotDirs = new Map<string, string>();
/** The three rows of the first test: (a) /v1, (b) local control surface, (c) the operator itself. */
const sources: { api?: Episode; local?: Episode; operator?: Episode } = {};

beforeAll(async () => {
  cloud = await startCloud();
  disposables.push(cloud);
  const [a, b] = await Promise.all([
    startFleet(cloud, { count: 2, subtaskMs: 250, args: SIM_ARGS }),
    startFleet(cloud, { count: 2, autoEpisodes: 60, subtaskMs: 100, args: [...SIM_ARGS, '--name-prefix', 'auto', '--seed', '7'] }),
  ]);
  fleetA = a;
  fleetB = b;
  disposables.push(fleetA, fleetB);
  fleetA.robots.forEach((id, i) => robotDirs.set(id, fleetA.robotDir(i)));
  fleetB.robots.forEach((id, i) => robotDirs.set(id, fleetB.robotDir(i)));
});

afterAll(async () => {
  // In reverse order, each even when another failed (the first failure is rethrown).
  const errors: unknown[] = [];
  for (const d of disposables.reverse()) {
    try {
      await d[Symbol.asyncDispose]();
    } catch (err) {
      errors.push(err);
    }
  }
  if (errors.length > 0) throw errors[0];
});

/** A raw JSON call against the cloud (admin key). */
async function api<T = Record<string, unknown>>(path: string, init: { method?: string; json?: unknown } = {}): Promise<{ status: number; body: T; headers: Headers }> {
  const res = await cloud.fetch(path, { ...(init.method ? { method: init.method } : {}), ...(init.json !== undefined ? { json: init.json } : {}) });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as T, headers: res.headers };
}

function jsonType(v: unknown): string {
  if (v === null) return 'null';
  return Array.isArray(v) ? 'array' : typeof v;
}

/** The string form `metadata.<key>` / `annotation.<key>` filters compare (decisions.md). */
function attrString(v: unknown): string {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

/** Polls `fleet-agent context get` on a simulated robot until its operator is on `subtask`. */
async function waitForSubtask(dataDir: string, subtask: string): Promise<void> {
  let last: unknown;
  await waitFor(
    async () => {
      const r = await runAgentCli(['context', 'get', '--data-dir', dataDir]);
      if (r.code !== 0) return undefined;
      last = (JSON.parse(r.stdout) as { context: { subtask_id: string | null } }).context.subtask_id;
      return last === subtask ? true : undefined;
    },
    { timeoutMs: 20_000, intervalMs: 100, description: () => `the operator of ${dataDir} to reach subtask ${subtask} (last: ${String(last)})` },
  );
}

function waitIndexed(id: string): Promise<Episode> {
  return waitFor(() => getEpisode(cloud, id), { timeoutMs: 30_000, intervalMs: 100, description: `episode ${id} in the index` });
}

/**
 * Checks one filtered answer against a client-side filter of `all` (the full list fetched
 * before): the rows of `all` it returns are exactly those matching, in the same order; a row
 * indexed since must match too. Returns the matching ids.
 */
function expectFiltered(label: string, got: readonly Episode[], all: readonly Episode[], match: (e: Episode) => boolean): string[] {
  const known = new Set(all.map((e) => e.id));
  const expected = all.filter(match).map((e) => e.id);
  expect({ label, ids: got.filter((e) => known.has(e.id)).map((e) => e.id) }).toEqual({ label, ids: expected });
  expect({ label, notMatching: got.filter((e) => !match(e)).map((e) => e.id) }).toEqual({ label, notMatching: [] });
  return expected;
}

describe('the episode index through /v1, fed by simulated robots', () => {
  test('episodes started through /v1, through the local control surface and by the operator itself give rows of the same shape', async () => {
    const [robot0, robot1] = fleetA.robots as [string, string];
    const [dir0, dir1] = [fleetA.robotDir(0), fleetA.robotDir(1)];

    // (a) /v1 on robot 0, (b) the control socket of robot 1 (served by the simulator by default).
    const started = await sendCommand(cloud, robot0, 'episodes/start');
    expect(started.status, JSON.stringify(started.body)).toBe(200);
    const apiId = String(started.body.result?.episode_id);
    const local = await agentControl(dir1, ['episode', 'start']);
    const localId = String(local.episode_id);
    expect(local.robot_id).toBe(robot1);

    // Each operator follows the recording it did not start and steps through its task's subtasks.
    const taskOf = async (dir: string) => {
      const r = await runAgentCli(['context', 'get', '--data-dir', dir]);
      return (JSON.parse(r.stdout) as { context: { task_id: string } }).context.task_id;
    };
    const [task0, task1] = [await taskOf(dir0), await taskOf(dir1)];
    expect(Object.keys(SIM_SUBTASKS)).toContain(task0);
    expect(Object.keys(SIM_SUBTASKS)).toContain(task1);
    await Promise.all([waitForSubtask(dir0, SIM_SUBTASKS[task0]!.at(-1)!), waitForSubtask(dir1, SIM_SUBTASKS[task1]!.at(-1)!)]);

    const finished = await sendCommand(cloud, robot0, 'episodes/finish');
    expect(finished.status, JSON.stringify(finished.body)).toBe(200);
    expect(finished.body.result?.episode_id).toBe(apiId);
    expect((await agentControl(dir1, ['episode', 'finish'])).episode_id).toBe(localId);

    // (c) the first episode fleet B's operator on robot 0 started and ended on its own.
    const autoRobot = fleetB.robots[0]!;
    const [operatorRow] = await waitFor(
      async () => {
        const rows = await listEpisodes(cloud, `robot_id=${autoRobot}`);
        return rows.length > 0 ? rows : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200, description: `an episode of ${autoRobot} started by its operator` },
    );
    const rows = { api: await waitIndexed(apiId), local: await waitIndexed(localId), operator: (await getEpisode(cloud, operatorRow!.id))! };
    Object.assign(sources, rows);

    // Same keys (every field of the spec's Episode, nothing else) and the same JSON type per key.
    for (const [source, row] of Object.entries(rows)) {
      expect({ source, keys: Object.keys(row).sort() }).toEqual({ source, keys: EPISODE_KEYS });
      EpisodeSchema.parse(row);
    }
    // `subtask_id` is the subtask at the start (checked below), the one field whose value depends
    // on who started the recording; it is `string or null` in the spec.
    const typesOf = (row: Episode) => Object.fromEntries(EPISODE_KEYS.filter((k) => k !== 'subtask_id').map((k) => [k, jsonType(row[k as keyof Episode])]));
    expect(typesOf(rows.local)).toEqual(typesOf(rows.api));
    expect(typesOf(rows.operator)).toEqual(typesOf(rows.api));
    // Everything else is filled in, bar what the simulator has no value for.
    expect(Object.entries(typesOf(rows.api)).filter(([, t]) => t === 'null').map(([k]) => k)).toEqual(['bag_uri', 'eval_id']);

    const expectedSource = [
      { source: 'api', row: rows.api, robot: robot0, index: 0, name: 'sim-0', task: task0, outcome: 'success' },
      { source: 'local', row: rows.local, robot: robot1, index: 1, name: 'sim-1', task: task1, outcome: 'success' },
      { source: 'operator', row: rows.operator, robot: autoRobot, index: 0, name: 'auto-0', task: rows.operator.task_id!, outcome: rows.operator.recorded_outcome },
    ] as const;
    for (const { source, row, robot, index, name, task, outcome } of expectedSource) {
      // Stamped from the operator's context.
      expect({ source, row }).toMatchObject({
        source,
        row: {
          robot_id: robot,
          task_id: task,
          operator_id: `op_${index}`,
          operator_name: `Operator ${index}`,
          control_mode: 'teleop',
          policy_version_id: 'pv_sim_1',
          eval_id: null,
          session_name: `${name}-session`,
          metadata: {},
          annotations: {},
          replicas: [],
          bag_uri: null,
        },
      });
      expect(Object.keys(SIM_SUBTASKS)).toContain(row.task_id);
      // Recorded and effective outcome, and when the cloud indexed it.
      expect(['success', 'failure', 'discarded']).toContain(row.recorded_outcome);
      expect({ source, recorded: row.recorded_outcome, outcome: row.outcome }).toEqual({ source, recorded: outcome, outcome });
      expect(Date.parse(row.reported_at)).toBeGreaterThanOrEqual(Date.parse(row.started_at));
      expect(new Date(Date.parse(row.reported_at)).toISOString()).toBe(row.reported_at);
      // The recorded facts exactly as the agent wrote them into episode.json.
      const { facts } = await episodeFiles(robotDirs.get(robot)!, row.id);
      for (const key of RECORDED_FACTS) expect({ source, key, value: row[key] }).toEqual({ source, key, value: facts[key] });
      expect(row.recorded_outcome).toBe(facts.outcome);
      // One segment per subtask the operator stepped through, whoever started the recording.
      const segments: Segment[] = await getSegments(cloud, row.id);
      expect(segments).toEqual(facts.segments);
      expect({ source, subtasks: segments.map((s) => s.subtask_id) }).toEqual({ source, subtasks: SIM_SUBTASKS[row.task_id!] });
      expect(segments.map((s) => s.segment_index)).toEqual(segments.map((_, i) => i));
      // The list row is the single-episode row.
      expect((await listEpisodes(cloud, `robot_id=${robot}`)).find((e) => e.id === row.id)).toEqual(row);
    }
    // The operator's own episode is stamped with its first subtask (set before the verb); one
    // started through the API or the control socket is stamped before the operator reacts to it
    // by stepping to its first subtask, so it starts without one (its segments still have all).
    expect(rows.operator.subtask_id).toBe(SIM_SUBTASKS[rows.operator.task_id!]![0]);
    expect([rows.api.subtask_id, rows.local.subtask_id]).toEqual([null, null]);
  });

  test('keyset pagination with limit 1 to 3 walks every row exactly once while the operators keep recording', async () => {
    // The walk pauses after each of its first `pauses` pages for a new row. Each pause only
    // happens if that page has a next one, so start once the index holds more rows than those
    // pages take (limits 1, 2, 3, …): then every pause happens, however slowly the robots record.
    const pagesRows = (pauses: number) => Array.from({ length: pauses }, (_, i) => (i % 3) + 1).reduce((a, b) => a + b, 0);
    const atLeast = async (query: string, n: number) =>
      waitFor(
        async () => {
          const rows = await listEpisodes(cloud, query);
          return rows.length >= n ? rows : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 200, description: `${n} episodes (${query || 'any robot'}) in the index before the walk` },
      );
    const before = await atLeast('', pagesRows(3) + 1);
    const beforeIds = new Set(before.map((e) => e.id));

    async function walk(query: string, pauseOnPages: number): Promise<{ ids: string[]; pages: number }> {
      const ids: string[] = [];
      let cursor: string | null = null;
      let page = 0;
      do {
        const limit = (page % 3) + 1;
        const q: string = [query, `limit=${limit}`, cursor === null ? '' : `cursor=${encodeURIComponent(cursor)}`].filter(Boolean).join('&');
        const r = await api<{ episodes: Episode[]; cursor: string | null }>(`/v1/episodes?${q}`);
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        // A full page when there is more, never more than asked.
        expect(r.body.episodes.length).toBeLessThanOrEqual(limit);
        if (r.body.cursor !== null) expect(r.body.episodes.length).toBe(limit);
        ids.push(...r.body.episodes.map((e) => e.id));
        cursor = r.body.cursor;
        page += 1;
        if (cursor !== null && page <= pauseOnPages) {
          // New episodes get indexed between two pages of the walk.
          const known = (await listEpisodes(cloud, query)).length;
          await waitFor(async () => ((await listEpisodes(cloud, query)).length > known ? true : undefined), {
            timeoutMs: 30_000,
            intervalMs: 100,
            description: `a new episode (${query || 'any robot'}) while walking the index`,
          });
        }
      } while (cursor !== null);
      return { ids, pages: page };
    }

    const all = await walk('', 3);
    const after = await listEpisodes(cloud);
    // No duplicates, no row that existed at the start skipped, and the walk is exactly the index
    // in its order up to where it ended (new rows only ever come after the cursor).
    expect(new Set(all.ids).size).toBe(all.ids.length);
    expect([...beforeIds].filter((id) => !all.ids.includes(id))).toEqual([]);
    expect(all.ids).toEqual(after.slice(0, all.ids.length).map((e) => e.id));
    // Rows indexed during the walk were walked too.
    expect(all.ids.filter((id) => !beforeIds.has(id)).length).toBeGreaterThanOrEqual(3);
    expect(all.pages).toBeGreaterThan(before.length / 3);

    // The same under a filter: one robot of the fleet that keeps recording.
    const robot = fleetB.robots[1]!;
    const robotBefore = (await atLeast(`robot_id=${robot}`, pagesRows(1) + 1)).map((e) => e.id);
    const filtered = await walk(`robot_id=${robot}`, 1);
    const robotAfter = (await listEpisodes(cloud, `robot_id=${robot}`)).map((e) => e.id);
    expect(new Set(filtered.ids).size).toBe(filtered.ids.length);
    expect(robotBefore.filter((id) => !filtered.ids.includes(id))).toEqual([]);
    expect(filtered.ids).toEqual(robotAfter.slice(0, filtered.ids.length));
    expect(filtered.ids.length).toBeGreaterThan(robotBefore.length);

    // Bad paging input is a clear 400.
    for (const q of ['limit=0', 'limit=101', 'limit=x', 'cursor=not-a-cursor']) {
      const r = await api<{ error: { code: string } }>(`/v1/episodes?${q}`);
      expect({ q, status: r.status, code: r.body.error?.code }).toEqual({ q, status: 400, code: 'validation_failed' });
    }
  });

  test('every filter narrows the list exactly as a client-side filter of the full list does', async () => {
    // The auto fleet stops here: fewer rows to compare, and less load on the machine.
    if (fleetB.process.exit === null) await fleetB.kill('SIGTERM');

    // A robot with a context of its own, killed with SIGKILL while recording: the episode is
    // finalized as interrupted when the agent starts again (metadata.interrupted = true).
    const first = await startAgentProcess(cloud, { args: AGENT_ARGS, name: 'eval-bot' });
    disposables.push(first);
    const dir = first.dataDir;
    robotDirs.set(first.robotId, dir);
    await agentControl(dir, [
      'context',
      'set',
      '--session-name',
      'night-eval',
      '--task-id',
      'task_eval_pour',
      '--subtask-id',
      'approach',
      '--operator-id',
      'op_eval',
      '--control-mode',
      'autonomous',
      '--policy-version-id',
      'pv_eval_2',
      '--eval-id',
      'eval_1',
    ]);
    const discarded = String((await agentControl(dir, ['episode', 'start'])).episode_id);
    await agentControl(dir, ['episode', 'discard']);
    await waitIdle(dir);
    const interrupted = String((await agentControl(dir, ['episode', 'start'])).episode_id);
    await waitFor(async () => (((await agentControl(dir, ['status', '--json'])).recording_state as string) === 'recording' ? true : undefined), { description: 'recording' });
    expect((await first.kill('SIGKILL')).signal).toBe('SIGKILL');
    // Disposed before `first`, which removes the directory.
    disposables.push(await startAgentProcess(cloud, { dataDir: dir, enroll: false, args: AGENT_ARGS }));
    expect(await waitIndexed(discarded)).toMatchObject({ outcome: 'discarded', recorded_outcome: 'discarded', eval_id: 'eval_1', metadata: {} });
    expect(await waitIndexed(interrupted)).toMatchObject({
      outcome: 'failure',
      recorded_outcome: 'failure',
      metadata: { interrupted: true },
      control_mode: 'autonomous',
      policy_version_id: 'pv_eval_2',
      eval_id: 'eval_1',
      subtask_id: 'approach',
    });

    // Annotations to filter on (any JSON; the filter compares the value's string form).
    const [x, y, z] = [sources.api!.id, sources.local!.id, sources.operator!.id];
    for (const [id, annotations] of [
      [x, { qa: 'pass', score: 5, reviewed: true }],
      [y, { qa: 'pass', score: 3 }],
      [z, { qa: 'fail', tags: ['blurry'] }],
    ] as const) {
      const r = await api(`/v1/episodes/${id}`, { method: 'PATCH', json: { annotations } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }

    const all = await listEpisodes(cloud);
    expect(all.length).toBeGreaterThanOrEqual(6);
    const q = async (query: string) => listEpisodes(cloud, query);

    // Equality filters: every value present, and one that is not.
    for (const key of EQ_FILTERS) {
      const values = [...new Set(all.map((e) => e[key]).filter((v): v is string => v !== null))];
      // The data has variety for every key, so each filter must narrow.
      expect({ key, narrows: values.length >= 2 || all.some((e) => e[key] === null) }).toEqual({ key, narrows: true });
      for (const v of values) {
        const ids = expectFiltered(`${key}=${v}`, await q(`${key}=${encodeURIComponent(v)}`), all, (e) => e[key] === v);
        expect(ids.length).toBeGreaterThan(0);
        expect(ids.length).toBeLessThan(all.length);
      }
      if (key !== 'outcome') expect(await q(`${key}=no-such-value`)).toEqual([]);
    }

    // Combinations are ANDed.
    const robotA0 = fleetA.robots[0]!;
    expectFiltered('robot_id+outcome', await q(`robot_id=${robotA0}&outcome=success`), all, (e) => e.robot_id === robotA0 && e.outcome === 'success');
    expectFiltered(
      'operator_id+control_mode',
      await q('operator_id=op_0&control_mode=teleop&policy_version_id=pv_sim_1'),
      all,
      (e) => e.operator_id === 'op_0' && e.control_mode === 'teleop' && e.policy_version_id === 'pv_sim_1',
    );
    expect(await q(`robot_id=${robotA0}&eval_id=eval_1`)).toEqual([]);

    // metadata.<key>: the recorded layer.
    expect(expectFiltered('metadata.interrupted=true', await q('metadata.interrupted=true'), all, (e) => attrString(e.metadata?.interrupted) === 'true')).toEqual([interrupted]);
    expect(await q('metadata.interrupted=false')).toEqual([]);
    expect(await q(`metadata.interrupted=true&robot_id=${robotA0}`)).toEqual([]);
    expect((await q(`metadata.interrupted=true&eval_id=eval_1`)).map((e) => e.id)).toEqual([interrupted]);

    // annotation.<key>: the mutable layer, after the PATCHes above.
    const ann = (key: string, value: string) => (e: Episode) => e.annotations !== null && key in e.annotations && attrString(e.annotations[key]) === value;
    expect(expectFiltered('annotation.qa=pass', await q('annotation.qa=pass'), all, ann('qa', 'pass')).sort()).toEqual([x, y].sort());
    expect(expectFiltered('annotation.qa=fail', await q('annotation.qa=fail'), all, ann('qa', 'fail'))).toEqual([z]);
    expect(expectFiltered('annotation.score=5', await q('annotation.score=5'), all, ann('score', '5'))).toEqual([x]);
    expect(expectFiltered('annotation.reviewed=true', await q('annotation.reviewed=true'), all, ann('reviewed', 'true'))).toEqual([x]);
    expect(expectFiltered('annotation.tags', await q(`annotation.tags=${encodeURIComponent('["blurry"]')}`), all, ann('tags', '["blurry"]'))).toEqual([z]);
    expect((await q(`annotation.qa=pass&robot_id=${fleetA.robots[1]}`)).map((e) => e.id)).toEqual([y]);
    expect(await q('annotation.qa=pass&annotation.score=3&metadata.interrupted=true')).toEqual([]);

    // from / to: inclusive bounds on started_at (not the order of the index).
    const starts = [...new Set(all.map((e) => e.started_at))].sort((a, b) => Date.parse(a) - Date.parse(b));
    expect(starts.length).toBeGreaterThanOrEqual(4);
    const lo = starts[Math.floor(starts.length / 3)]!;
    const hi = starts[Math.floor((2 * starts.length) / 3)]!;
    const t = (e: Episode) => Date.parse(e.started_at);
    const fromIds = expectFiltered('from', await q(`from=${encodeURIComponent(lo)}`), all, (e) => t(e) >= Date.parse(lo));
    const toIds = expectFiltered('to', await q(`to=${encodeURIComponent(hi)}`), all, (e) => t(e) <= Date.parse(hi));
    const between = expectFiltered('from+to', await q(`from=${encodeURIComponent(lo)}&to=${encodeURIComponent(hi)}`), all, (e) => t(e) >= Date.parse(lo) && t(e) <= Date.parse(hi));
    for (const ids of [fromIds, toIds, between]) {
      expect(ids.length).toBeGreaterThan(0);
      expect(ids.length).toBeLessThan(all.length);
    }
    // The same instant written with an offset is the same bound.
    const loOffset = new Date(Date.parse(lo) + 2 * 3600_000).toISOString().replace('Z', '+02:00');
    expect((await q(`from=${encodeURIComponent(loOffset)}`)).map((e) => e.id)).toEqual(fromIds);
    expect(await q(`from=${encodeURIComponent(new Date(Date.parse(starts.at(-1)!) + 1).toISOString())}`)).toEqual([]);
    const exactly = await q(`from=${encodeURIComponent(lo)}&to=${encodeURIComponent(lo)}`);
    expect(exactly.length).toBeGreaterThan(0);
    for (const e of exactly) expect(e.started_at).toBe(lo);

    // sync_state: nothing is replicated yet, so every row is unverified (also at a named destination).
    expectFiltered('sync_state=unverified', await q('sync_state=unverified'), all, () => true);
    expectFiltered('sync_state=unverified&to=dst', await q('sync_state=unverified&to=dst_nowhere'), all, () => true);
    expectFiltered('sync_state=unverified&destination_id', await q('sync_state=unverified&destination_id=dst_nowhere'), all, () => true);
    expect(await q('sync_state=synced')).toEqual([]);
    expect(await q('sync_state=verified&to=dst_nowhere')).toEqual([]);
    expectFiltered('sync_state+robot_id', await q(`sync_state=unverified&robot_id=${robotA0}`), all, (e) => e.robot_id === robotA0);

    // Bad filters are 400s naming the key.
    for (const bad of ['colour=red', 'outcome=maybe', 'from=yesterday', 'to=2026-02-30T00:00:00Z', 'metadata.=x', 'sync_state=lost', 'to=dst_x', `from=${encodeURIComponent(hi)}&to=${encodeURIComponent(lo)}`, 'task_id=a&task_id=b']) {
      const r = await api<{ error: { code: string; details?: { issues?: { path: string }[] } } }>(`/v1/episodes?${bad}`);
      expect({ bad, status: r.status, code: r.body.error?.code }).toEqual({ bad, status: 400, code: 'validation_failed' });
      expect(r.body.error.details?.issues?.length ?? 0).toBeGreaterThan(0);
    }
  });

  test('export pages concatenate to every row exactly once, with files matching the manifest on the robot', async () => {
    const before = await listEpisodes(cloud);
    const rows: EpisodeWithLocations[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await cloud.fetch(`/v1/episodes/export?limit=2${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
      const text = await res.text();
      expect(res.status, text).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
      const lines = text.split('\n').filter(Boolean);
      cursor = res.headers.get('x-next-cursor');
      expect(lines.length).toBeLessThanOrEqual(2);
      if (cursor !== null) expect(lines.length).toBe(2);
      rows.push(...lines.map((l) => EpisodeWithLocationsSchema.parse(JSON.parse(l))));
      pages += 1;
    } while (cursor !== null);
    const after = await listEpisodes(cloud);

    const ids = rows.map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toEqual(after.slice(0, ids.length).map((e) => e.id));
    expect(before.map((e) => e.id).filter((id) => !ids.includes(id))).toEqual([]);
    expect(pages).toBe(Math.max(1, Math.ceil(ids.length / 2)));

    const byId = new Map(after.map((e) => [e.id, e]));
    let withFiles = 0;
    for (const row of rows) {
      const { files, locations, ...episode } = row;
      // The export row is the list row plus files and locations.
      expect(episode).toEqual(byId.get(row.id));
      expect(locations).toEqual([]);
      const dir = robotDirs.get(row.robot_id);
      expect(dir, `the data directory of ${row.robot_id}`).toBeDefined();
      const { manifest } = await episodeFiles(dir!, row.id);
      expect({ id: row.id, files }).toEqual({ id: row.id, files: manifest.files });
      expect(row.bag_size_bytes).toBe(manifest.total_bytes);
      if (row.recorded_outcome === 'discarded') expect(files).toEqual([]);
      // And the manifest describes the bytes on disk.
      for (const f of files) {
        const bytes = await readFile(join(dir!, 'episodes', row.id, ...f.path.split('/')));
        expect({ path: f.path, size_bytes: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') }).toEqual(f);
        withFiles += 1;
      }
    }
    expect(withFiles).toBeGreaterThanOrEqual(3);

    // A filtered export pages the same way and matches the filtered list.
    const robot = fleetB.robots[0]!;
    const filteredRows: string[] = [];
    cursor = null;
    do {
      const res = await cloud.fetch(`/v1/episodes/export?robot_id=${robot}&limit=1${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
      expect(res.status).toBe(200);
      filteredRows.push(...(await res.text()).split('\n').filter(Boolean).map((l) => (JSON.parse(l) as EpisodeWithLocations).id));
      cursor = res.headers.get('x-next-cursor');
    } while (cursor !== null);
    expect(filteredRows).toEqual((await listEpisodes(cloud, `robot_id=${robot}`)).map((e) => e.id));
    // Nothing matches: an empty body and no cursor.
    const none = await cloud.fetch('/v1/episodes/export?task_id=no-such-task&limit=1');
    expect(none.status).toBe(200);
    expect(await none.text()).toBe('');
    expect(none.headers.get('x-next-cursor')).toBeNull();
    for (const bad of ['limit=0', 'limit=5001', 'cursor=%%%', 'colour=red']) {
      const r = await cloud.fetch(`/v1/episodes/export?${bad}`);
      expect({ bad, status: r.status }).toEqual({ bad, status: 400 });
    }
  });

  test('PATCH annotations shallow-merges, a null deletes, and nothing else can be patched', async () => {
    const id = sources.local!.id;
    const original = (await getEpisode(cloud, id))!;
    expect(original.annotations).toEqual({ qa: 'pass', score: 3 });

    const first = await api<Episode>(`/v1/episodes/${id}`, { method: 'PATCH', json: { annotations: { reviewer: 'ada', tags: ['grasp', 'slow'], nested: { a: 1 } } } });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.annotations).toEqual({ qa: 'pass', score: 3, reviewer: 'ada', tags: ['grasp', 'slow'], nested: { a: 1 } });

    const second = await api<Episode>(`/v1/episodes/${id}`, { method: 'PATCH', json: { annotations: { reviewer: null, score: null, qa: 'fail', nested: { b: 2 }, absent: null } } });
    expect(second.status, JSON.stringify(second.body)).toBe(200);
    // Shallow: `nested` is replaced, not merged; deleting a key that is not there is fine.
    const expected = { qa: 'fail', tags: ['grasp', 'slow'], nested: { b: 2 } };
    expect(second.body.annotations).toEqual(expected);
    const now = (await getEpisode(cloud, id))!;
    expect(now).toEqual(second.body);
    // Only the annotations layer changed.
    expect({ ...now, annotations: null }).toEqual({ ...original, annotations: null });

    // The filters follow the layer.
    expect((await listEpisodes(cloud, 'annotation.reviewer=ada')).map((e) => e.id)).toEqual([]);
    expect((await listEpisodes(cloud, 'annotation.qa=fail')).map((e) => e.id)).toContain(id);
    expect((await listEpisodes(cloud, 'annotation.qa=pass')).map((e) => e.id)).not.toContain(id);
    expect((await listEpisodes(cloud, `annotation.nested=${encodeURIComponent('{"b":2}')}`)).map((e) => e.id)).toEqual([id]);

    // Recorded facts and the metadata layer are not patchable; a bad body is 400 and changes nothing.
    for (const body of [{ annotations: { a: 1 }, task_id: 'x' }, { metadata: { a: 1 } }, { annotations: 'x' }, {}, { annotations: { '': 1 } }]) {
      const r = await api<{ error: { code: string } }>(`/v1/episodes/${id}`, { method: 'PATCH', json: body });
      expect({ body, status: r.status, code: r.body.error?.code }).toEqual({ body, status: 400, code: 'validation_failed' });
    }
    expect((await getEpisode(cloud, id))!.annotations).toEqual(expected);
    expect((await api(`/v1/episodes/ep_doesnotexist00`, { method: 'PATCH', json: { annotations: { a: 1 } } })).status).toBe(404);
  });

  test('PATCH outcome changes the effective outcome, never recorded_outcome, and each change is in the history', async () => {
    const id = sources.api!.id;
    const original = (await getEpisode(cloud, id))!;
    expect(original).toMatchObject({ outcome: 'success', recorded_outcome: 'success' });
    expect((await api<{ outcome_history: unknown[] }>(`/v1/episodes/${id}/outcome-history`)).body).toEqual({ outcome_history: [] });

    const changes = [
      { outcome: 'failure', reason: 'the part slipped out of the bin' },
      { outcome: 'discarded', reason: 'duplicate take' },
    ] as const;
    for (const change of changes) {
      const r = await api<Episode>(`/v1/episodes/${id}/outcome`, { method: 'PATCH', json: change });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body).toEqual({ ...original, outcome: change.outcome });
      expect(await getEpisode(cloud, id)).toEqual(r.body);
    }

    const history = await api<{ outcome_history: unknown[] }>(`/v1/episodes/${id}/outcome-history`);
    expect(history.status).toBe(200);
    const entries = history.body.outcome_history.map((c) => OutcomeChangeSchema.parse(c));
    expect(entries.map(({ from, to, reason }) => ({ from, to, reason }))).toEqual([
      { from: 'success', to: 'failure', reason: changes[0].reason },
      { from: 'failure', to: 'discarded', reason: changes[1].reason },
    ]);
    for (const e of entries) {
      expect(e.actor.length).toBeGreaterThan(0);
      expect(Date.parse(e.at)).toBeGreaterThanOrEqual(Date.parse(original.reported_at));
    }
    expect(Date.parse(entries[1]!.at)).toBeGreaterThanOrEqual(Date.parse(entries[0]!.at));

    // The outcome filter and the export see the effective outcome; the recorded one stays.
    expect((await listEpisodes(cloud, 'outcome=discarded')).map((e) => e.id)).toContain(id);
    expect((await listEpisodes(cloud, 'outcome=success')).map((e) => e.id)).not.toContain(id);
    const exported = (await cloud.fetch(`/v1/episodes/export?robot_id=${original.robot_id}`).then((r) => r.text())).split('\n').filter(Boolean).map((l) => JSON.parse(l) as EpisodeWithLocations);
    expect(exported.find((e) => e.id === id)).toMatchObject({ outcome: 'discarded', recorded_outcome: 'success' });

    // Bad bodies: 400, no history row.
    for (const body of [{ outcome: 'failure' }, { outcome: 'failure', reason: '' }, { outcome: 'lost', reason: 'x' }, { outcome: 'failure', reason: 'x', recorded_outcome: 'failure' }]) {
      const r = await api<{ error: { code: string } }>(`/v1/episodes/${id}/outcome`, { method: 'PATCH', json: body });
      expect({ body, status: r.status, code: r.body.error?.code }).toEqual({ body, status: 400, code: 'validation_failed' });
    }
    expect((await api<{ outcome_history: unknown[] }>(`/v1/episodes/${id}/outcome-history`)).body.outcome_history).toHaveLength(2);
    expect((await getEpisode(cloud, id))!.recorded_outcome).toBe('success');
    for (const path of [`/v1/episodes/ep_doesnotexist00/outcome-history`, `/v1/episodes/ep_doesnotexist00/segments`, `/v1/episodes/ep_doesnotexist00`]) {
      expect((await api(path)).status).toBe(404);
    }
    expect((await api(`/v1/episodes/ep_doesnotexist00/outcome`, { method: 'PATCH', json: changes[0] })).status).toBe(404);
  });
});
