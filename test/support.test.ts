import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import mqtt from 'mqtt';
import { afterEach, describe, expect, test } from 'vitest';
import { makeTempDir, startCloud } from './support/cloud.js';
import { exclusiveAddress, holdExclusive } from './support/exclusive.js';
import { spreadOut } from './support/sequencer.js';
import { ensureMosquitto } from './support/mosquitto.js';
import { runProcess, spawnProcess } from './support/process.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const node = process.execPath;

describe('spawnProcess', () => {
  test('waits for a matching stdout line, including one printed before the wait', async () => {
    await using proc = spawnProcess(node, ['-e', "console.log('one'); setTimeout(() => console.log('two'), 50); setInterval(() => {}, 1000)"]);
    expect(await proc.waitForStdout((l) => l === 'two')).toBe('two');
    expect(await proc.waitForStdout((l) => l === 'one')).toBe('one');
  });

  test('a process that exits before the line: the error carries its exit and stderr', async () => {
    await using proc = spawnProcess(node, ['-e', "console.error('boom: bad things'); process.exit(3)"], { name: 'doomed' });
    await expect(proc.waitForStdout((l) => l === 'never', { description: 'the never line' })).rejects.toThrow(
      /doomed exited \(code 3[\s\S]*the never line[\s\S]*boom: bad things/,
    );
  });

  test('a line that never comes times out with a useful message', async () => {
    await using proc = spawnProcess(node, ['-e', "console.log('alive'); setInterval(() => {}, 1000)"], { name: 'quiet' });
    // Up first, so the short timeout measures the wait and not a loaded machine's node start.
    await proc.waitForStdout((l) => l === 'alive');
    await expect(proc.waitForStdout((l) => l === 'never', { timeoutMs: 200 })).rejects.toThrow(/timed out after 200 ms[\s\S]*quiet[\s\S]*alive/);
  });

  test('kill escalates to SIGKILL when SIGTERM is ignored', async () => {
    await using proc = spawnProcess(node, ['-e', "process.on('SIGTERM', () => {}); console.log('ready'); setInterval(() => {}, 1000)"]);
    await proc.waitForStdout((l) => l === 'ready');
    expect(await proc.kill('SIGTERM', 200)).toEqual({ code: null, signal: 'SIGKILL' });
    expect(alive(proc.pid)).toBe(false);
  });

  test('runProcess returns code, stdout and stderr', async () => {
    const res = await runProcess(node, ['-e', "console.log('out'); console.error('err'); process.exit(2)"]);
    expect(res).toEqual({ code: 2, signal: null, stdout: 'out\n', stderr: 'err\n' });
  });
});

describe.runIf(process.platform === 'linux')('holdExclusive', () => {
  const name = () => `test-${process.pid}-${Math.random().toString(36).slice(2)}`;

  test('a second holder waits until the first gives it back', async () => {
    const lock = name();
    const first = await holdExclusive(lock);
    await expect(holdExclusive(lock, { timeoutMs: 500 })).rejects.toThrow(/timed out after 500 ms/);
    // Waiting when the first gives it back: taken then.
    const taking = holdExclusive(lock, { timeoutMs: 30_000 });
    await first[Symbol.asyncDispose]();
    const second = await taking;
    await second[Symbol.asyncDispose]();
  });

  test('a holder killed with SIGKILL leaves nothing stale: the next one takes it', async () => {
    const lock = name();
    const script = `require('node:net').createServer().listen({ path: ${JSON.stringify(exclusiveAddress(lock))} }, () => console.log('held'))`;
    await using holder = spawnProcess(node, ['-e', script], { name: 'lock holder' });
    await holder.waitForStdout((l) => l === 'held');
    await expect(holdExclusive(lock, { timeoutMs: 500 })).rejects.toThrow(/timed out after 500 ms waiting for the "test-/);
    await holder.kill('SIGKILL');
    const mine = await holdExclusive(lock, { timeoutMs: 30_000 });
    await mine[Symbol.asyncDispose]();
  });
});

describe('spreadOut (the test sequencer)', () => {
  test('moves the picked items to every (gap + 1)th place from the front, the rest in their order', () => {
    const sorted = ['b1', 'b2', 'b3', 'e1', 'e2', 'e3', 'e4', 'e5', 'u1', 'u2'];
    expect(spreadOut(sorted, (x) => x.startsWith('b'), 2)).toEqual(['b1', 'e1', 'e2', 'b2', 'e3', 'e4', 'b3', 'e5', 'u1', 'u2']);
    // Fewer others than the gaps need: the rest go at the end, in order.
    expect(spreadOut(['b1', 'b2', 'b3', 'e1'], (x) => x.startsWith('b'), 2)).toEqual(['b1', 'e1', 'b2', 'b3']);
    expect(spreadOut(['e1', 'e2'], (x) => x.startsWith('b'), 2)).toEqual(['e1', 'e2']);
  });
});

describe('startCloud', () => {
  test('dispose kills the process and removes its temp dir, also when the test body throws', async () => {
    let pid = 0;
    let root = '';
    const body = async () => {
      await using cloud = await startCloud();
      pid = cloud.process.pid;
      root = dirname(cloud.dataDir);
      expect(alive(pid)).toBe(true);
      throw new Error('the test failed');
    };
    await expect(body()).rejects.toThrow('the test failed');
    expect(pid).toBeGreaterThan(0);
    expect(alive(pid)).toBe(false);
    expect(existsSync(root)).toBe(false);
  });

  test('a given data dir is kept on dispose', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'data');
    {
      await using cloud = await startCloud({ dataDir });
      expect(cloud.dataDir).toBe(dataDir);
    }
    expect(existsSync(join(dataDir, 'admin-key'))).toBe(true);
  });

  test('a serve that dies at start: startCloud rejects with its stderr', async () => {
    await expect(startCloud({ topology: 'single', args: ['--http-port', '99999'] })).rejects.toThrow(/exited \(code 1[\s\S]*invalid configuration: httpPort/);
  });
});

describe.skipIf(!ensureMosquitto().ok)('startCloud with FLEET_TEST_REPLICAS=2', () => {
  const saved = process.env.FLEET_TEST_REPLICAS;
  afterEach(() => {
    if (saved === undefined) delete process.env.FLEET_TEST_REPLICAS;
    else process.env.FLEET_TEST_REPLICAS = saved;
  });

  // Counts the requests each process logged (fastify's `request completed` line at info).
  const served = (procs: readonly { stderrLines: readonly string[] }[]) => procs.map((p) => p.stderrLines.filter((l) => l.includes('"request completed"')).length);

  test('two serve processes behind one broker and a front; requests reach both; a restart finds the same data', async () => {
    process.env.FLEET_TEST_REPLICAS = '2';
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'data');
    let front = '';
    let broker = '';
    let keyId = '';
    {
      await using cloud = await startCloud({ dataDir });
      expect(cloud.processes).toHaveLength(2);
      expect(new Set(cloud.processes.map((p) => p.pid)).size).toBe(2);
      expect(cloud.mqtt).toMatch(/^mqtt:\/\/127\.0\.0\.1:\d+$/);
      // The helpers' requests go one to each replica in turn.
      for (let i = 0; i < 4; i++) expect((await cloud.fetch('/v1/robots')).status).toBe(200);
      // A key made through one replica works through the other: both read one store.
      const made = await cloud.fetch('/v1/api-keys', { method: 'POST', json: { name: 'ci', scopes: ['robots:read'] } });
      expect(made.status).toBe(201);
      const key = (await made.json()) as { id: string; key: string };
      keyId = key.id;
      for (let i = 0; i < 2; i++) expect((await cloud.fetch('/v1/robots', { key: key.key })).status).toBe(200);
      // (A process logs its line as the answer goes out: polled, not read once.)
      await expect.poll(() => served(cloud.processes).sort()).toEqual([3, 4]);
      // Fresh connections through the front (what agents and CLIs use) take turns too.
      const before = served(cloud.processes);
      for (let i = 0; i < 4; i++) {
        const res = await fetch(`${cloud.http}/v1/robots`, { headers: { authorization: `Bearer ${cloud.adminKey}`, connection: 'close' } });
        expect(res.status).toBe(200);
      }
      await expect.poll(() => served(cloud.processes).map((n, i) => n - before[i]!)).toEqual([2, 2]);
      front = cloud.http;
      broker = cloud.mqtt;
      const exit = await cloud.kill('SIGTERM');
      expect(exit.code).toBe(0);
      expect(cloud.processes.every((p) => p.exit !== null)).toBe(true);
    }
    // The broker went down with the cloud (nothing outlives a test), as the embedded one does.
    await expect(mqtt.connectAsync(broker, { reconnectPeriod: 0, connectTimeout: 5_000 })).rejects.toThrow();
    // Started again on the front's port, as restart tests do: the same broker address and files.
    await using again = await startCloud({ dataDir, args: ['--http-port', new URL(front).port] });
    expect(again.http).toBe(front);
    expect(again.mqtt).toBe(broker);
    const keys = (await (await again.fetch('/v1/api-keys')).json()) as { api_keys: { id: string }[] };
    expect(keys.api_keys.map((k) => k.id)).toContain(keyId);
  });

  test('topology single keeps one process with its embedded broker', async () => {
    process.env.FLEET_TEST_REPLICAS = '2';
    await using cloud = await startCloud({ topology: 'single' });
    expect(cloud.processes).toHaveLength(1);
    expect(cloud.http).toBe((JSON.parse(cloud.stdoutLines.find((l) => l.startsWith('{"http"'))!) as { http: string }).http);
  });
});
