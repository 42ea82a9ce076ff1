/**
 * The live event stream, `GET /v1/events/stream`, against a real `fleet-cloud serve` (or two
 * replicas behind mosquitto with FLEET_TEST_REPLICAS=2, each request going to the next replica)
 * and simulated robots, read through the typed client as the console reads it and through
 * `fleet events tail`:
 * - robot.status arrives when a robot connects and when it starts and stops recording;
 *   episode.finalized when an episode is finished;
 * - connections dropped mid-stream resume with Last-Event-ID: the events received equal the log
 *   (a replay from evt_0), nothing lost and nothing twice;
 * - another organization's events never arrive.
 * Tests run in order on one cloud and share the robot the first one connects.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FleetClient, type FleetEvent, type FleetEventType } from '@fleet/client';
import { cleanEnv, makeTempDir, REPO_ROOT, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { spawnProcess } from './support/process.js';
import { createEnrollmentToken, otherOrganization, sendCommand, startFleet, waitForRobot, type FleetProcess } from './support/robots.js';

const FLEET_CLI = join(REPO_ROOT, 'packages', 'client', 'dist', 'cli.js');

let cloud: CloudProcess;
let fleet: FleetProcess;
let home: TempDir;
let robot: string;

/** Events read from one stream in the background until it is stopped. */
interface Collector {
  readonly events: FleetEvent[];
  readonly ids: string[];
  opened: number;
  reconnects: number;
  /** What each reconnection followed, for a failure's message: when, the wait and the error. */
  readonly log: string[];
  /** Cuts the current connection as a network failure would: the client reconnects by itself. */
  drop(): void;
  stop(): Promise<void>;
}

/**
 * Reads `client.events.stream(opts)` into an array. Its fetch goes through the cloud's own (the
 * replicas in turn), with an abort of its own per connection that `drop` fires.
 */
async function collect(key: string, opts: { types?: FleetEventType[]; lastEventId?: string } = {}): Promise<Collector> {
  let current: (() => void) | null = null;
  const droppable: typeof fetch = async (input, init) => {
    const ac = new AbortController();
    const dropped = new Error('dropped by the test');
    current = () => ac.abort(dropped);
    // The cloud's fetch sends each request to the next replica: a reconnection lands on another one.
    const url = input instanceof Request ? input.url : String(input);
    const res = await cloud.fetch(url.slice(cloud.http.length), { ...init, signal: ac.signal, key: null });
    if (!res.body) return res;
    // Aborting a fetch does not always error a body a reader already holds (undici), so the drop
    // errors the body the client reads itself, as a cut connection would, and then aborts the fetch.
    const reader = res.body.getReader();
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    const body = new ReadableStream<Uint8Array>({
      start: (c) => void (controller = c),
      pull: async (c) => {
        let chunk: Uint8Array | null = null;
        let failure: { error: unknown } | null = null;
        try {
          const r = await reader.read();
          if (!r.done) chunk = r.value as Uint8Array;
        } catch (err) {
          failure = { error: err };
        }
        try {
          if (failure) c.error(failure.error);
          else if (chunk === null) c.close();
          else c.enqueue(chunk);
        } catch {
          // Already errored by a drop.
        }
      },
      cancel: (reason) => reader.cancel(reason),
    });
    current = () => {
      try {
        controller.error(dropped);
      } catch {
        // Already closed.
      }
      ac.abort(dropped);
      reader.cancel(dropped).catch(() => undefined);
    };
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  const client = new FleetClient({ baseUrl: cloud.http, apiKey: key, fetch: droppable });
  const stop = new AbortController();
  let open!: () => void;
  const firstOpen = new Promise<void>((resolve) => (open = resolve));
  const c: Collector = {
    events: [],
    get ids() {
      return this.events.map((e) => e.id);
    },
    opened: 0,
    reconnects: 0,
    log: [],
    drop: () => current?.(),
    stop: async () => {
      stop.abort();
      await done;
    },
  };
  const done = (async () => {
    for await (const e of client.events.stream({
      ...opts,
      signal: stop.signal,
      onOpen: () => {
        c.opened++;
        c.log.push(`${new Date().toISOString()} opened (${c.opened})`);
        open();
      },
      onReconnect: (r) => {
        c.reconnects++;
        c.log.push(`${new Date().toISOString()} reconnecting: attempt ${r.attempt}, in ${r.waitMs} ms, after ${String(r.error)}`);
      },
    })) {
      c.events.push(e);
    }
  })();
  done.catch(() => undefined);
  await Promise.race([firstOpen, done]);
  return c;
}

const statusesOf = (c: Collector, robotId: string) =>
  c.events.flatMap((e) => (e.type === 'robot.status' && e.data.robot_id === robotId ? [`${e.data.online ? 'online' : 'offline'}/${e.data.recording_state ?? '-'}`] : []));

async function record(): Promise<string> {
  await waitForRobot(cloud, robot, (r) => r.recording_state === 'idle', { timeoutMs: 30_000, description: 'idle' });
  const started = await sendCommand(cloud, robot, 'episodes/start');
  expect(started.status, JSON.stringify(started.body)).toBe(200);
  const finished = await sendCommand(cloud, robot, 'episodes/finish');
  expect(finished.status, JSON.stringify(finished.body)).toBe(200);
  return String(started.body.result!.episode_id);
}

beforeAll(async () => {
  home = await makeTempDir('events-tail-');
  cloud = await startCloud();
});

afterAll(async () => {
  await fleet?.[Symbol.asyncDispose]();
  await cloud?.[Symbol.asyncDispose]();
  await home?.[Symbol.asyncDispose]();
});

/** `fleet events tail …args` with the cloud's URL and admin key, and a HOME without a config file. */
function tail(args: readonly string[]) {
  return spawnProcess(process.execPath, [FLEET_CLI, 'events', 'tail', ...args], {
    name: `fleet events tail ${args.join(' ')}`,
    cwd: REPO_ROOT,
    env: cleanEnv({ FLEET_URL: cloud.http, FLEET_API_KEY: cloud.adminKey, HOME: home.path, XDG_CONFIG_HOME: undefined }),
  });
}

describe('GET /v1/events/stream end to end', () => {
  test('robot.status when a robot connects and records, episode.finalized when its episode is finished; fleet events tail prints them', async () => {
    const live = await collect(cloud.adminKey);
    const json = tail(['--json']);
    const readable = tail(['--type', 'robot.status']);
    try {
      await json.waitForStderr((l) => l.includes('listening for events'));
      await readable.waitForStderr((l) => l.includes('listening for events'));
      fleet = await startFleet(cloud, { count: 1, subtaskMs: 100 });
      robot = fleet.robots[0]!;
      await expect.poll(() => statusesOf(live, robot)).toEqual(['online/idle']);
      expect(live.events.find((e) => e.type === 'robot.status')!.data).toEqual({
        schema_version: 1,
        robot_id: robot,
        online: true,
        recording_state: 'idle',
        last_seen_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) as unknown,
      });

      const episode = await record();
      await expect.poll(() => live.events.some((e) => e.type === 'episode.finalized' && e.data.episode_id === episode)).toBe(true);
      const finalized = live.events.find((e) => e.type === 'episode.finalized')!;
      expect(finalized.data).toMatchObject({ schema_version: 1, episode_id: episode, robot_id: robot, state: 'reported' });
      await expect.poll(() => statusesOf(live, robot).at(-1)).toBe('online/idle');
      expect(statusesOf(live, robot)).toContain('online/recording');
      // Ids are opaque handles, none twice, in the log's order (a replay from its start has them in the same order).
      for (const id of live.ids) expect(id).toMatch(/^evt_[a-z2-7]{26}$/);
      expect(new Set(live.ids).size).toBe(live.ids.length);
      const replay = await collect(cloud.adminKey, { lastEventId: 'evt_0' });
      try {
        await expect.poll(() => replay.ids.includes(live.ids.at(-1)!)).toBe(true);
        expect(replay.ids.filter((id) => live.ids.includes(id))).toEqual(live.ids);
      } finally {
        await replay.stop();
      }

      // The CLI: NDJSON of the same events, and readable lines of the statuses.
      await expect.poll(() => json.stdoutLines.map((l) => (JSON.parse(l) as FleetEvent).id)).toEqual(live.ids);
      expect(json.stdoutLines.map((l) => JSON.parse(l) as unknown)).toEqual(live.events);
      const statusIds = live.events.filter((e) => e.type === 'robot.status').map((e) => e.id);
      await expect.poll(() => readable.stdoutLines.length).toBe(statusIds.length);
      readable.stdoutLines.forEach((line, i) => expect(line).toMatch(new RegExp(`^\\d{4}-\\S+Z  ${statusIds[i]}  robot\\.status\\s+${robot}  online  (idle|recording|finalizing)$`)));
    } finally {
      await live.stop();
      await json.kill('SIGINT');
      await readable.kill('SIGINT');
    }
  });

  test('fleet events tail refuses an unknown type or a malformed --since (exit 2)', async () => {
    for (const args of [['--type', 'robot.battery'], ['--since', '42']]) {
      const p = tail(args);
      expect(await p.exited).toEqual({ code: 2, signal: null });
      expect(p.stderrLines).toHaveLength(1);
    }
  });

  test('dropped connections resume with Last-Event-ID: the events received are the log, none lost, none twice', async () => {
    const c = await collect(cloud.adminKey);
    const episodes: string[] = [];
    for (let i = 0; i < 3; i++) {
      episodes.push(await record());
      // A drop while events are coming (the finish is still being reported and indexed).
      c.log.push(`${new Date().toISOString()} drop`);
      c.drop();
      // The reconnection waits the server's retry (2 s), longer while attempts fail: a minute's room.
      await expect
        .poll(() => c.opened, { timeout: 60_000 })
        .toBe(i + 2)
        .catch((err: unknown) => {
          throw new Error(`connection ${i + 2} did not open; the stream's log:\n${c.log.join('\n')}`, { cause: err });
        });
    }
    const last = episodes.at(-1)!;
    await expect.poll(() => c.events.some((e) => e.type === 'episode.finalized' && e.data.episode_id === last)).toBe(true);
    expect(c.reconnects).toBe(3);

    // The log, replayed from its start through another connection.
    const log = await collect(cloud.adminKey, { lastEventId: 'evt_0' });
    const upTo = c.events.find((e) => e.type === 'episode.finalized' && e.data.episode_id === last)!.id;
    await expect.poll(() => log.ids.includes(upTo)).toBe(true);
    // Ids are opaque: their place in the replayed log orders them.
    const n = (id: string) => log.ids.indexOf(id);
    const received = c.ids.filter((id) => n(id) <= n(upTo));
    const expected = log.ids.slice(n(received[0]!), n(upTo) + 1);
    expect(received).toEqual(expected);
    expect(new Set(c.ids).size).toBe(c.ids.length);
    expect(c.events.filter((e) => e.type === 'episode.finalized').map((e) => e.type === 'episode.finalized' && e.data.episode_id)).toEqual(episodes);
    // The same events, byte for byte the same data.
    expect(c.events.filter((e) => n(e.id) <= n(upTo))).toEqual(log.events.slice(n(received[0]!), n(upTo) + 1));
    await c.stop();
    await log.stop();
  });

  test("another organization's events never arrive", async () => {
    const other = await otherOrganization(cloud, 'stream isolation');
    const mine = await collect(cloud.adminKey);
    const replayed = await collect(cloud.adminKey, { lastEventId: 'evt_0' });
    const theirs = await collect(other.key);
    const token = await createEnrollmentToken(cloud, { key: other.key, maxUses: 1 });
    await using otherFleet = await startFleet(cloud, { count: 1, token: token.token });
    const otherRobot = otherFleet.robots[0]!;
    await expect.poll(() => statusesOf(theirs, otherRobot)).toEqual(['online/idle']);
    // Something of this organization after it, so both streams have read past the other's event.
    const episode = await record();
    for (const c of [mine, replayed]) await expect.poll(() => c.events.some((e) => e.type === 'episode.finalized' && e.data.episode_id === episode)).toBe(true);
    for (const c of [mine, replayed]) {
      expect(c.events.filter((e) => e.data.robot_id !== robot)).toEqual([]);
    }
    expect(theirs.events.filter((e) => e.data.robot_id !== otherRobot)).toEqual([]);
    for (const c of [mine, replayed, theirs]) await c.stop();
  });
});
