import { spawn, type ChildProcess } from 'node:child_process';
import { stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Aedes } from 'aedes';
import mqtt from 'mqtt';
import { EnrollBodySchema, RobotStatusSchema, topics, type EnrollResponse, type RobotStatus } from '@fleet/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_RUNTIME_VERSION } from './config.js';
import { credentialsPath } from './credentials.js';
import { fakeRobotId, makeTempDir, removeTempDirs } from './test-support.js';

// The CLI runs from its TypeScript source (tsx, `source` export condition), so this needs no build.
const CLI = fileURLToPath(new URL('./cli.ts', import.meta.url));
const NODE_ARGS = ['--conditions=source', '--import', 'tsx', CLI];

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(args: string[]): Promise<Result> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...NODE_ARGS, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FLEET_AGENT_DATA_DIR: undefined, FLEET_AGENT_CONFIG: 'none' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

function firstStdoutLine(child: ChildProcess, timeoutMs = 20_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error('no stdout line in time')), timeoutMs);
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const nl = buf.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        resolve(buf.slice(0, nl));
      }
    });
  });
}

describe('fleet-agent CLI', () => {
  const robotId = fakeRobotId();
  let dataDir = '';
  let brokerUrl = '';
  let apiUrl = '';
  let http: HttpServer;
  let mqttServer: Server;
  let broker: Aedes;
  const enrollBodies: unknown[] = [];
  let daemon: ChildProcess | undefined;
  let daemonStderr = '';

  beforeAll(async () => {
    dataDir = await makeTempDir();
    broker = await Aedes.createBroker({ authenticate: (client, username, password, done) => done(null, username === 'observer' || (client.id === robotId && password?.toString() === 'pw')) });
    mqttServer = createServer(broker.handle);
    await new Promise<void>((r) => mqttServer.listen(0, '127.0.0.1', r));
    brokerUrl = `mqtt://127.0.0.1:${(mqttServer.address() as AddressInfo).port}`;
    http = createHttpServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        const parsed = EnrollBodySchema.safeParse(JSON.parse(body));
        enrollBodies.push(JSON.parse(body));
        res.setHeader('content-type', 'application/json');
        if (!parsed.success || parsed.data.token !== 'ret_good') {
          res.statusCode = 401;
          res.end(JSON.stringify({ error: { code: 'unauthenticated', message: 'enrollment token is not valid' } }));
          return;
        }
        const answer: EnrollResponse = {
          robot_id: robotId,
          name: parsed.data.name ?? 'robot',
          mqtt: { url: brokerUrl, urls: [brokerUrl], client_id: robotId, username: robotId, password: 'pw', topic_prefix: topics.prefix(robotId) },
        };
        res.statusCode = 201;
        res.end(JSON.stringify(answer));
      });
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    apiUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    daemon?.kill('SIGKILL');
    await new Promise<void>((r) => broker.close(() => r()));
    await new Promise<void>((r) => mqttServer.close(() => r()));
    await new Promise<void>((r) => http.close(() => r()));
    await removeTempDirs();
  });

  it('start without credentials exits non-zero and says to enroll', async () => {
    const r = await run(['start', '--data-dir', dataDir]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/fleet-agent enroll/);
  });

  it('start takes no license key', async () => {
    const r = await run(['start', '--data-dir', dataDir, '--license-key', 'k']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/unknown option '--license-key'/);
  });

  it('enroll with a bad token reports the API error', async () => {
    const r = await run(['enroll', '--api', apiUrl, '--token', 'ret_bad', '--data-dir', dataDir]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/unauthenticated.*enrollment token is not valid/);
  });

  it('enroll stores the credentials (0600) and refuses to overwrite them without --force', async () => {
    const r = await run(['enroll', '--api', apiUrl, '--token', 'ret_good', '--data-dir', dataDir, '--name', 'arm-7', '--platform', 'ur5e']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ robot_id: robotId, name: 'arm-7', data_dir: dataDir });
    expect(enrollBodies.at(-1)).toEqual({ token: 'ret_good', name: 'arm-7', platform: 'ur5e', runtime_version: AGENT_RUNTIME_VERSION });
    expect((await stat(credentialsPath(dataDir))).mode & 0o777).toBe(0o600);
    const again = await run(['enroll', '--api', apiUrl, '--token', 'ret_good', '--data-dir', dataDir]);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toMatch(/--force/);
  });

  it('start prints one connected line once connected and announces the enrolled platform', async () => {
    // A robot configured as on hardware: a program records each episode (here a node script that
    // appends to a file until SIGINT).
    const configFile = join(dataDir, '..', `agent-${process.pid}.yaml`);
    const script = "const fs=require('node:fs');const fd=fs.openSync('rec.bin','w');const t=setInterval(()=>fs.writeSync(fd,'x'),20);process.on('SIGINT',()=>{clearInterval(t);fs.closeSync(fd);process.exit(0)})";
    await writeFile(configFile, `recorder:\n  kind: command\n  command: [${JSON.stringify(process.execPath)}, -e, ${JSON.stringify(script)}]\n  start_grace_ms: 100\n`);
    const child = spawn(process.execPath, [...NODE_ARGS, 'start', '--config', configFile, '--data-dir', dataDir], { stdio: ['ignore', 'pipe', 'pipe'] });
    daemon = child;
    child.stderr.on('data', (d: Buffer) => (daemonStderr += d.toString()));
    const line = await firstStdoutLine(child);
    expect(JSON.parse(line)).toEqual({ robot_id: robotId, state: 'connected' });
    // Logs are JSON lines on stderr.
    const firstLog = daemonStderr.split('\n')[0]!;
    expect(JSON.parse(firstLog)).toHaveProperty('level');
    const observer = await mqtt.connectAsync(brokerUrl, { clientId: 'observer', username: 'observer', protocolVersion: 4 });
    const statuses: RobotStatus[] = [];
    observer.on('message', (_t, p) => statuses.push(RobotStatusSchema.parse(JSON.parse(p.toString()))));
    await observer.subscribeAsync(topics.status(robotId), { qos: 1 });
    await expect.poll(() => statuses.length).toBeGreaterThan(0);
    expect(statuses[0]).toMatchObject({ online: true, platform: 'ur5e', capabilities: ['episodes.v1'] });
    await observer.endAsync();
  });

  it('context, episode and status talk to the running daemon', async () => {
    const set = await run(['context', 'set', '--data-dir', dataDir, '--task-id', 'task_9', '--operator-name', 'Ada']);
    expect(set.code).toBe(0);
    expect((JSON.parse(set.stdout) as { context: unknown }).context).toMatchObject({ task_id: 'task_9', operator_name: 'Ada', eval_id: null });
    const start = await run(['episode', 'start', '--data-dir', dataDir]);
    expect(start.code).toBe(0);
    const started = JSON.parse(start.stdout) as { episode_id: string; recording_state: string };
    expect(started.recording_state).toBe('recording');
    const status = await run(['status', '--json', '--data-dir', dataDir]);
    expect(JSON.parse(status.stdout)).toMatchObject({ robot_id: robotId, recording_state: 'recording', episode_id: started.episode_id, connected: true });
    expect((JSON.parse(status.stdout) as { uploads: unknown }).uploads).toEqual(expect.any(Array));
    // Without --json, and stdout not a terminal: plain lines.
    const plain = await run(['status', '--data-dir', dataDir]);
    expect(plain.code).toBe(0);
    expect(plain.stdout.split('\n')[0]).toBe(`robot=${robotId} name=${(JSON.parse(status.stdout) as { name: string }).name} recording=recording connected=true`);
    const illegal = await run(['episode', 'start', '--data-dir', dataDir]);
    expect(illegal.code).toBe(1);
    expect(illegal.stderr).toMatch(/invalid_state: cannot start while recording/);
    const finish = await run(['episode', 'finish', '--data-dir', dataDir]);
    expect(finish.code).toBe(0);
    expect(JSON.parse(finish.stdout)).toMatchObject({ episode_id: started.episode_id, outcome: 'success' });
    const get = await run(['context', 'get', '--data-dir', dataDir]);
    expect((JSON.parse(get.stdout) as { context: unknown }).context).toMatchObject({ task_id: 'task_9' });
    const metrics = await run(['metrics', '--data-dir', dataDir]);
    expect(metrics.code).toBe(0);
    expect(metrics.stdout).toMatch(/^fleet_agent_connected 1$/m);
  }, 60_000);

  it('shuts down cleanly on SIGTERM and leaves a retained offline status', async () => {
    const child = daemon!;
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    daemon = undefined;
    const observer = await mqtt.connectAsync(brokerUrl, { clientId: 'observer2', username: 'observer', protocolVersion: 4 });
    const statuses: RobotStatus[] = [];
    observer.on('message', (_t, p) => statuses.push(RobotStatusSchema.parse(JSON.parse(p.toString()))));
    await observer.subscribeAsync(topics.status(robotId), { qos: 1 });
    await expect.poll(() => statuses.length).toBeGreaterThan(0);
    expect(statuses[0]!.online).toBe(false);
    await observer.endAsync();
    const after = await run(['status', '--data-dir', dataDir]);
    expect(after.code).toBe(3);
    expect((await run(['metrics', '--data-dir', dataDir])).code).toBe(3);
  });
});
