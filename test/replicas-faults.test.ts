import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { verifySignature } from '@fleet/protocol';
import { SimulatedRobotActions } from '../agent/src/actions.js';
import { createTestPki, startHttpsReceiver, type TestPki, type TestReceiver } from '../cloud/src/egress/test-https.js';
import { startClockedAgent, type ClockedAgent } from './support/clocked-agent.js';
import { startCloud, type CloudProcess } from './support/cloud.js';
import { recordShortEpisode, waitForIndexed, waitOutboxEmpty } from './support/episodes.js';
import { ensureMosquitto, startMosquitto, type MosquittoBroker } from './support/mosquitto.js';
import { ensurePostgresBinaries, startPostgres, type PgServer } from './support/postgres.js';
import { startReplicas, type ReplicaSet } from './support/replicas.js';
import { sendCommand, startAgentProcess, type AgentProcess, type CommandResponse } from './support/robots.js';
import { socketOwner } from './support/sockets.js';
import { waitFor } from './support/wait.js';

// Faults of a replicated cloud, with real processes: `serve` replicas on one store behind one
// mosquitto, one of them killed with SIGKILL (no shutdown, no drain) in the middle of work; and
// the database restarted under a running cloud.
const mosquitto = ensureMosquitto();

describe.skipIf(!mosquitto.ok)('a replica killed with SIGKILL during an ingest burst', () => {
  let broker: MosquittoBroker;
  let replicas: ReplicaSet;
  let agents: AgentProcess[] = [];

  beforeAll(async () => {
    broker = await startMosquitto();
    replicas = await startReplicas({ broker, count: 2 });
    const [a, b] = replicas.clouds as [CloudProcess, CloudProcess];
    agents = [await startAgentProcess(a), await startAgentProcess(b)];
  }, 120_000);

  afterAll(async () => {
    await Promise.allSettled(agents.map((g) => g[Symbol.asyncDispose]()));
    await replicas?.[Symbol.asyncDispose]();
    await broker?.[Symbol.asyncDispose]();
  });

  test('loses no episode and indexes none twice; robots go on with the survivor', async () => {
    const [a, b] = replicas.clouds as [CloudProcess, CloudProcess];
    const ids: string[] = [];
    // Both robots record back to back while replica A takes its share of the reports.
    const burst = Promise.all(
      agents.map(async (agent) => {
        for (let i = 0; i < 8; i++) ids.push(await recordShortEpisode(agent.dataDir));
      }),
    );
    await waitFor(() => (ids.length >= 4 ? true : undefined), { timeoutMs: 60_000, description: 'four episodes recorded' });
    await waitForIndexed(b, ids.slice(0, 4));
    const exit = await a.kill('SIGKILL');
    expect(exit.signal).toBe('SIGKILL');
    await burst;
    expect(ids).toHaveLength(16);
    // Reports A had taken and not acknowledged come again from the robots' outboxes.
    const counts = await waitForIndexed(b, ids, 120_000);
    expect(ids.map((id) => counts.get(id))).toEqual(ids.map(() => 1));
    for (const agent of agents) await waitOutboxEmpty(agent.dataDir, 120_000);
    for (const agent of agents) {
      await waitFor(async () => ((await sendCommand(b, agent.robotId, 'stack/status')).status === 200 ? true : undefined), {
        timeoutMs: 30_000,
        description: `a command through the surviving replica to ${agent.robotId}`,
      });
    }
  });
});

/** One webhook delivery as the receiver saw it. */
interface Arrival {
  sub: number;
  eventId: string;
  /** The replica process that sent it (the owner of the connection's client socket). */
  pid: number | null;
  body: string;
  signature: string;
  /** The receiver's 200 went out (false: the connection died first, its sender killed). */
  answered: boolean;
}

describe.skipIf(!mosquitto.ok)('a replica killed with SIGKILL during a webhook backlog', () => {
  const SUBSCRIPTIONS = 3;
  const EVENTS_EACH = 12;
  let pki: TestPki;
  let broker: MosquittoBroker;
  let replicas: ReplicaSet;
  let rx: TestReceiver;
  const arrivals: Arrival[] = [];
  /** Requests the receiver has not answered yet, by arrival. */
  const unanswered = new Set<Arrival>();
  /** While set, the receiver holds its answers (around the kill, so what is in flight stays so). */
  let hold: Promise<void> | null = null;

  beforeAll(async () => {
    pki = createTestPki();
    broker = await startMosquitto();
    replicas = await startReplicas({ broker, count: 2, args: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
    const pids = replicas.clouds.map((c) => c.process.pid);
    // A connection's sender, looked up when its first request arrives and kept (a request that
    // arrives after its sender was killed can no longer be looked up: that one is the dead one's).
    const senders = new Map<number, number>();
    const senderOf = (port: number | undefined): number | null => {
      if (port === undefined) return null;
      let known = senders.get(port) ?? null;
      // /proc/net/tcp is read in pieces while connections come and go, and may miss a line: a few tries.
      for (let i = 0; known === null && i < 5; i++) known = socketOwner(port, pids);
      if (known !== null) senders.set(port, known);
      return known;
    };
    // A slow receiver (each answer 300 ms late), so that a backlog builds behind each queue head.
    rx = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
      const port = res.socket?.remotePort;
      const arrival: Arrival = {
        sub: Number(/\/hook\/(\d+)$/.exec(req.url)?.[1]),
        eventId: String(req.headers['x-service-event-id']),
        pid: senderOf(port),
        body: req.body,
        signature: String(req.headers['x-service-signature']),
        answered: false,
      };
      arrivals.push(arrival);
      unanswered.add(arrival);
      res.on('finish', () => (arrival.answered = true));
      setTimeout(() => {
        void (hold ?? Promise.resolve()).then(() => {
          unanswered.delete(arrival);
          if (!res.destroyed) res.writeHead(200).end();
        });
      }, 300);
    });
  }, 120_000);

  afterAll(async () => {
    await rx?.close();
    await replicas?.[Symbol.asyncDispose]();
    await broker?.[Symbol.asyncDispose]();
    pki?.cleanup();
  });

  test('every event arrives, each subscription in order; only what the dead replica had in flight comes twice', { timeout: 180_000 }, async () => {
    const clouds = replicas.clouds as [CloudProcess, CloudProcess];
    const subs: { id: string; secret: string }[] = [];
    for (let i = 0; i < SUBSCRIPTIONS; i++) {
      const created = await clouds[i % 2]!.fetch('/v1/webhooks', { method: 'POST', json: { url: `https://127.0.0.1:${rx.port}/hook/${i}`, events: ['episode.finalized'] } });
      expect(created.status, await created.clone().text()).toBe(201);
      subs.push((await created.json()) as { id: string; secret: string });
    }
    // Queued through both replicas, so both deliver (each delivery loop claims due heads).
    const queued: string[][] = subs.map(() => []);
    for (let n = 0; n < EVENTS_EACH; n++) {
      for (const [i, sub] of subs.entries()) {
        const res = await clouds[(n + i) % 2]!.fetch(`/v1/webhooks/${sub.id}/test`, { method: 'POST' });
        expect(res.status).toBe(202);
        queued[i]!.push(((await res.json()) as { event_id: string }).event_id);
      }
    }
    const total = SUBSCRIPTIONS * EVENTS_EACH;

    // Mid-backlog: each queue has begun, much is still to come, and a replica has a delivery in flight.
    const victim = await waitFor(
      () => {
        const started = subs.every((_, i) => arrivals.some((a) => a.sub === i));
        if (!started || new Set(arrivals.map((a) => a.eventId)).size > total / 2) return undefined;
        const holder = [...unanswered].find((a) => a.pid !== null)?.pid;
        return clouds.find((c) => c.process.pid === holder);
      },
      { timeoutMs: 60_000, intervalMs: 10, description: 'a replica holding a delivery mid-backlog' },
    );
    const survivor = clouds.find((c) => c !== victim)!;
    // No answer goes out around the kill: what the victim has in flight is never answered.
    let resume!: () => void;
    hold = new Promise((resolve) => (resume = resolve));
    const beforeKill = arrivals.length;
    const exit = await victim.kill('SIGKILL');
    expect(exit.signal).toBe('SIGKILL');
    hold = null;
    resume();
    const victimPid = victim.process.pid;

    // The survivor takes the dead replica's queue heads over once their leases run out (receiver timeout + 5 s).
    const ids = (i: number) => arrivals.filter((a) => a.sub === i).map((a) => a.eventId);
    await waitFor(() => (queued.every((q, i) => q.every((id) => ids(i).includes(id))) ? true : undefined), {
      timeoutMs: 120_000,
      intervalMs: 100,
      description: () => `every event to arrive (${new Set(arrivals.map((a) => a.eventId)).size} of ${total})`,
    });
    await waitFor(
      async () => {
        const list = (await (await survivor.fetch('/v1/webhooks')).json()) as { webhooks: { pending_deliveries: number }[] };
        return list.webhooks.every((w) => w.pending_deliveries === 0) ? true : undefined;
      },
      { timeoutMs: 30_000, description: 'every queue drained' },
    );

    expect(arrivals.slice(0, beforeKill).some((a) => a.pid === victimPid)).toBe(true);
    expect(arrivals.some((a) => a.pid === survivor.process.pid)).toBe(true);
    // Never answered: what the dead replica had in flight (its connection died with it).
    const lost = new Set(arrivals.filter((a) => !a.answered).map((a) => a.eventId));
    expect(lost.size).toBeGreaterThan(0);
    // What the dead replica may not have recorded: what it sent and had no answer to, and an answer
    // already on its way back when it was killed (answered, not yet written to the database). Either
    // way the dead replica sent it; a request whose sender could not be looked up came after the kill.
    const sentByVictim = new Set(arrivals.filter((a) => a.pid === victimPid || a.pid === null).map((a) => a.eventId));
    for (const [i, sub] of subs.entries()) {
      const received = ids(i);
      // In order of first arrival, all of them.
      expect(collapse(received)).toEqual(queued[i]);
      // A duplicate only of the event the dead replica had in flight on this subscription, at most one.
      const repeated = received.filter((id, k) => received.indexOf(id) !== k);
      expect(repeated.length).toBeLessThanOrEqual(1);
      for (const id of repeated) expect(sentByVictim.has(id), `${id} came twice; the dead replica never sent it`).toBe(true);
      for (const a of arrivals.filter((x) => x.sub === i)) {
        expect(verifySignature({ body: a.body, header: a.signature, secrets: [sub.secret], nowS: Date.now() / 1000 }).ok).toBe(true);
      }
    }
  });
});

/** Drops consecutive repeats: [a, a, b, b, c] -> [a, b, c]. */
function collapse(ids: readonly string[]): string[] {
  return ids.filter((id, i) => i === 0 || ids[i - 1] !== id);
}

/** A robot whose go_home takes until the test lets it finish; counts how often it moved. */
class SlowHomingRobot extends SimulatedRobotActions {
  homings = 0;
  private finish!: () => void;
  private readonly finished = new Promise<void>((resolve) => (this.finish = resolve));

  override async goHome(): Promise<Record<string, unknown>> {
    this.homings++;
    await this.finished;
    return super.goHome();
  }

  arrive(): void {
    this.finish();
  }
}

describe.skipIf(!mosquitto.ok)('a replica killed with SIGKILL while a command with an Idempotency-Key waits for the robot', () => {
  /** The cloud's default Idempotency-Key claim lease (config idempotencyLeaseMs). */
  const LEASE_MS = 15_000;
  let broker: MosquittoBroker;
  let replicas: ReplicaSet;
  let robot: ClockedAgent;
  const actions = new SlowHomingRobot();

  beforeAll(async () => {
    broker = await startMosquitto();
    // Commands wait a minute for the robot: longer than a claim's lease, so only renewal keeps it.
    replicas = await startReplicas({ broker, count: 2, args: ['--command-timeout-ms', '60000'] });
    robot = await startClockedAgent(replicas.clouds[1]!, { actions });
  }, 120_000);

  afterAll(async () => {
    actions.arrive();
    await robot?.[Symbol.asyncDispose]();
    await replicas?.[Symbol.asyncDispose]();
    await broker?.[Symbol.asyncDispose]();
  });

  test('a retry through another replica is refused while the claim is alive, runs once its lease is out, and the robot moves once', { timeout: 180_000 }, async () => {
    const [a, b] = replicas.clouds as [CloudProcess, CloudProcess];
    const key = `home-${randomUUID()}`;
    const retry = () => sendCommand(b, robot.robotId, 'go-home', { idempotencyKey: key });
    const inUse = (r: CommandResponse) => r.status === 409 && r.body.error?.code === 'idempotency_key_in_use';

    const startedAt = Date.now();
    const original = sendCommand(a, robot.robotId, 'go-home', { idempotencyKey: key }).then(
      (r) => ({ answered: r }),
      (err: unknown) => ({ failed: err }),
    );
    await waitFor(() => (actions.homings === 1 ? true : undefined), { timeoutMs: 30_000, description: 'the robot to start homing' });

    // A alive, the robot still moving, past the first lease: A renews the claim, B refuses the retry.
    const alive = await waitFor(
      async () => {
        const r = await retry();
        if (!inUse(r)) throw new Error(`a retry while A holds the key answered ${r.status} ${JSON.stringify(r.body)}`);
        return Date.now() - startedAt > LEASE_MS + 2_000 ? r : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500, description: 'a lease past its first term, still refusing retries' },
    );
    expect(alive.status).toBe(409);

    const exit = await a.kill('SIGKILL');
    expect(exit.signal).toBe('SIGKILL');
    const killedAt = Date.now();
    // The robot finishes the move it started; its answer goes to a replica that is gone.
    actions.arrive();
    expect(await original).toHaveProperty('failed');

    // The dead replica's claim stays until its lease runs out, then the retry runs.
    let refusedAfterKill = 0;
    const answer = await waitFor(
      async () => {
        const r = await retry();
        if (inUse(r)) {
          refusedAfterKill++;
          return undefined;
        }
        return r;
      },
      { timeoutMs: 60_000, intervalMs: 250, description: 'the retry through B to run' },
    );
    const freeAfterMs = Date.now() - killedAt;
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    expect(answer.body.result).toMatchObject({ ok: true, cmd_id: key, command: 'go_home' });
    expect(refusedAfterKill).toBeGreaterThan(0);
    // At most one lease after the kill (its last renewal came before it), with room for a loaded machine.
    expect(freeAfterMs).toBeLessThan(LEASE_MS + 10_000);
    // The command id is the key: the robot answered the retry from its memory and moved once.
    expect(actions.homings).toBe(1);

    const replay = await retry();
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(actions.homings).toBe(1);
  });
});

const pgBin = ensurePostgresBinaries();

describe.skipIf(!pgBin)('a PostgreSQL restart under a running cloud', () => {
  let server: PgServer;
  let cloud: CloudProcess;
  let agent: AgentProcess;

  beforeAll(async () => {
    server = await startPostgres(pgBin!);
    const admin = new pg.Client({ connectionString: server.url('postgres') });
    await admin.connect();
    await admin.query('CREATE DATABASE fleet_restart');
    await admin.end();
    cloud = await startCloud({ env: { FLEET_DATABASE_URL: server.url('fleet_restart') } });
    agent = await startAgentProcess(cloud);
  }, 120_000);

  afterAll(async () => {
    await agent?.[Symbol.asyncDispose]();
    await cloud?.[Symbol.asyncDispose]();
    await server?.stop();
  });

  test('the cloud recovers on its own: ready again, and episodes recorded meanwhile are indexed once', async () => {
    const before = await recordShortEpisode(agent.dataDir);
    await waitForIndexed(cloud, [before]);
    await server.restart();
    // Recorded right after the restart: the report may meet dropped connections and is resent.
    const after = [await recordShortEpisode(agent.dataDir), await recordShortEpisode(agent.dataDir)];
    await waitFor(async () => ((await cloud.fetch('/readyz', { key: null })).status === 200 ? true : undefined), { timeoutMs: 60_000, description: '/readyz 200 after the restart' });
    const counts = await waitForIndexed(cloud, [before, ...after], 90_000);
    expect([before, ...after].map((id) => counts.get(id))).toEqual([1, 1, 1]);
    await waitOutboxEmpty(agent.dataDir, 90_000);
    expect((await sendCommand(cloud, agent.robotId, 'stack/status')).status).toBe(200);
  });
});
