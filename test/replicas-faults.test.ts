import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startCloud, type CloudProcess } from './support/cloud.js';
import { recordShortEpisode, waitForIndexed, waitOutboxEmpty } from './support/episodes.js';
import { ensureMosquitto, startMosquitto, type MosquittoBroker } from './support/mosquitto.js';
import { ensurePostgresBinaries, startPostgres, type PgServer } from './support/postgres.js';
import { startReplicas, type ReplicaSet } from './support/replicas.js';
import { sendCommand, startAgentProcess, type AgentProcess } from './support/robots.js';
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
