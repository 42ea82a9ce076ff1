/**
 * Fixtures for the agent's unit tests: temporary data directories, a log capture, a manual
 * clock and scheduler, and agents or bare state machines built on them. Only `*.test.ts` files
 * import this module (the build excludes it).
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, open, readdir, readFile, rm, type FileHandle } from 'node:fs/promises';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { McapStreamReader, McapWriter } from '@mcap/core';
import { Aedes, type Client } from 'aedes';
import mqtt, { type MqttClient } from 'mqtt';
import { ManualClock, OutboxBatchSchema, OutboxMessageSchema, parseRobotTopic, topics, type OutboxAck, type OutboxMessage, type RobotCommand } from '@fleet/protocol';
import { pino, type Logger } from 'pino';
import { SimulatedRobotActions } from './actions.js';
import { parseAgentConfig, type AgentConfigInput } from './config.js';
import type { Credentials } from './credentials.js';
import { Agent, type AgentDeps } from './daemon.js';
import type { RecordedFiles, Recorder, RecorderStats, RecordingHandle, RecordingInfo } from './recording/recorder.js';
import { RecordingStateMachine } from './recording/state-machine.js';
import { openAgentStore, type SqliteAgentStore } from './store/sqlite.js';
import { ManualScheduler, type Scheduler, type TimerHandle } from './time.js';

export interface LogCapture {
  logger: Logger;
  /** Every record logged so far, parsed. */
  records: Record<string, unknown>[];
  messages(): string[];
}

export function captureLogs(): LogCapture {
  const records: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) records.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const logger = pino({ level: 'debug' }, sink);
  return { logger, records, messages: () => records.map((r) => String(r.msg)) };
}

const tempDirs: string[] = [];

/** A fresh directory under the OS temp dir (short, so a Unix socket path fits in it). */
export async function makeTempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'fa-'));
  tempDirs.push(dir);
  return dir;
}

export async function removeTempDirs(): Promise<void> {
  for (const dir of tempDirs.splice(0)) await rm(dir, { recursive: true, force: true });
}

/** The test recorder's file. */
export const TEST_RECORDING_FILE = 'recording.mcap';

/**
 * The agent tests' recorder (the synthetic arm lives in the simulator, which the agent does not
 * depend on): one real MCAP file, `recording.mcap`, one channel of opaque messages, and at every
 * tick one message carrying exactly the payload the manual clock owes at `bytesPerSecond`. Small
 * chunks, so a recording abandoned mid-way (a crash test) has messages on disk.
 */
export class TestRecorder implements Recorder {
  private readonly queues = new Set<{ queue: Promise<void> }>();

  constructor(private readonly opts: { clock: { now(): number }; scheduler: Scheduler; bytesPerSecond: number; chunkIntervalMs: number }) {}

  /** Resolves once every write that has fallen due so far is on disk. */
  async settled(): Promise<void> {
    await Promise.all([...this.queues].map((q) => q.queue));
  }

  async start(dir: string, info: RecordingInfo): Promise<RecordingHandle> {
    const path = join(dir, TEST_RECORDING_FILE);
    const fh: FileHandle = await open(path, 'wx', 0o644);
    let position = 0n;
    const writer = new McapWriter({
      writable: {
        write: async (buf: Uint8Array) => {
          await fh.write(buf);
          position += BigInt(buf.byteLength);
        },
        position: () => position,
      },
      chunkSize: 16 * 1024,
    });
    await writer.start({ profile: '', library: 'fleet-agent test recorder' });
    const channelId = await writer.registerChannel({ topic: '/payload', messageEncoding: 'binary', schemaId: 0, metadata: new Map() });
    const { clock, scheduler, bytesPerSecond, chunkIntervalMs } = this.opts;
    const state: { queue: Promise<void> } = { queue: Promise.resolve() };
    this.queues.add(state);
    let written = 0;
    let messages = 0;
    let timer: TimerHandle | undefined;
    let failure: unknown;
    const writeOwed = (now: number) => {
      state.queue = state.queue.then(async () => {
        const owed = Math.floor((Math.max(0, now - info.startedAt) * bytesPerSecond) / 1000) - written;
        if (owed <= 0 || failure !== undefined) return;
        const t = BigInt(now) * 1_000_000n;
        try {
          await writer.addMessage({ channelId, sequence: messages, logTime: t, publishTime: t, data: new Uint8Array(owed).fill(messages % 251) });
          written += owed;
          messages += 1;
        } catch (err) {
          failure = err;
        }
      });
    };
    const tick = () => {
      timer = scheduler.setTimeout(() => {
        writeOwed(clock.now());
        tick();
      }, chunkIntervalMs);
    };
    tick();
    const halt = () => {
      if (timer !== undefined) scheduler.clearTimeout(timer);
      timer = undefined;
    };
    const stats = (): RecorderStats => ({ messageCount: messages, bytes: Number(position) });
    return {
      stats,
      stop: async (): Promise<RecordedFiles> => {
        halt();
        writeOwed(clock.now());
        await state.queue;
        try {
          if (failure !== undefined) throw failure instanceof Error ? failure : new Error('test recorder write failed', { cause: failure });
          await writer.end();
          await fh.sync();
        } finally {
          await fh.close();
          this.queues.delete(state);
        }
        return { files: [TEST_RECORDING_FILE], messageCount: messages };
      },
      abort: async () => {
        halt();
        await state.queue;
        await fh.close().catch(() => undefined);
        this.queues.delete(state);
        await rm(path, { force: true });
      },
    };
  }

  /** After a crash: the MCAP files of `dir` and the messages that can still be read from them. */
  async recover(dir: string): Promise<RecordedFiles> {
    const files = (await readdir(dir)).filter((n) => n.endsWith('.mcap')).sort();
    let messageCount = 0;
    for (const name of files) {
      const reader = new McapStreamReader({ validateCrcs: false });
      try {
        reader.append(await readFile(join(dir, name)));
        for (let rec = reader.nextRecord(); rec; rec = reader.nextRecord()) if (rec.type === 'Message') messageCount += 1;
      } catch {
        // A file cut short ends in a partial record: what came before still counts.
      }
    }
    return { files, messageCount };
  }
}

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
export function fakeRobotId(): string {
  return `rbt_${[...randomBytes(26)].map((b) => BASE32[b & 31]).join('')}`;
}

export function testCredentials(robotId = fakeRobotId(), mqttUrl = 'mqtt://127.0.0.1:1', password = 'robot-secret'): Credentials {
  return {
    robot_id: robotId,
    name: 'test robot',
    mqtt: { url: mqttUrl, client_id: robotId, username: robotId, password, topic_prefix: `fleet/v1/robots/${robotId}/` },
    api_url: 'http://127.0.0.1:1',
  };
}

export interface TestMachine {
  machine: RecordingStateMachine;
  recorder: TestRecorder;
  store: SqliteAgentStore;
  clock: ManualClock;
  scheduler: ManualScheduler;
  dataDir: string;
  robotId: string;
  logs: LogCapture;
  close(): Promise<void>;
}

/** A state machine with a synthetic recorder on a manual clock (64 KiB/s, 100 ms ticks). */
export async function openTestMachine(
  opts: { dataDir?: string; clock?: ManualClock; robotId?: string; finalizingDelayMs?: number; bytesPerSecond?: number; init?: boolean } = {},
): Promise<TestMachine> {
  const dataDir = opts.dataDir ?? (await makeTempDir());
  const clock = opts.clock ?? new ManualClock();
  const scheduler = new ManualScheduler(clock);
  const logs = captureLogs();
  const store = openAgentStore(dataDir, clock);
  const robotId = opts.robotId ?? fakeRobotId();
  const recorder = new TestRecorder({ clock, scheduler, bytesPerSecond: opts.bytesPerSecond ?? 64 * 1024, chunkIntervalMs: 100 });
  const machine = new RecordingStateMachine({
    store,
    recorder,
    robotId,
    dataDir,
    clock,
    scheduler,
    logger: logs.logger,
    finalizingDelayMs: opts.finalizingDelayMs ?? 0,
    finalizeRetryMs: 1000,
  });
  if (opts.init ?? true) await machine.init();
  return {
    machine,
    recorder,
    store,
    clock,
    scheduler,
    dataDir,
    robotId,
    logs,
    async close() {
      await machine.close();
      await store.close();
    },
  };
}

export interface TestAgent {
  agent: Agent;
  clock: ManualClock;
  scheduler: Scheduler;
  dataDir: string;
  actions: SimulatedRobotActions;
  logs: LogCapture;
  credentials: Credentials;
}

/**
 * An agent on a manual clock. Without `link` it has no broker connection (commands are fed to
 * `agent.commands` directly); with `link` it uses the real scheduler so reconnects happen.
 */
export async function startTestAgent(
  opts: {
    dataDir?: string;
    config?: Partial<AgentConfigInput>;
    credentials?: Credentials;
    link?: boolean;
    controlSocket?: boolean;
    clock?: ManualClock;
    scheduler?: Scheduler;
  } = {},
): Promise<TestAgent> {
  const dataDir = opts.dataDir ?? (await makeTempDir());
  const clock = opts.clock ?? new ManualClock();
  const scheduler = opts.scheduler ?? new ManualScheduler(clock);
  const config = parseAgentConfig({ dataDir, reconnectMinMs: 20, reconnectMaxMs: 200, ...opts.config });
  const logs = captureLogs();
  const actions = new SimulatedRobotActions();
  const credentials = opts.credentials ?? testCredentials();
  const deps: AgentDeps = {
    clock,
    scheduler,
    logger: logs.logger,
    recorder: new TestRecorder({ clock, scheduler, bytesPerSecond: config.bytesPerSecond, chunkIntervalMs: config.chunkIntervalMs }),
    actions,
    credentials,
    link: opts.link ?? false,
    controlSocket: opts.controlSocket ?? false,
  };
  const agent = new Agent(config, deps);
  await agent.start();
  return { agent, clock, scheduler, dataDir, actions, logs, credentials };
}

/** A command as the cloud sends it. */
export function commandPayload(clock: ManualClock, cmdId: string, command: RobotCommand['command'], args?: Record<string, unknown>): string {
  const cmd: RobotCommand = { cmd_id: cmdId, command, sent_at: clock.now(), ...(args ? { args } : {}) };
  return JSON.stringify(cmd);
}

export interface TestBroker {
  url: string;
  port: number;
  /** Broker-side connections by client id. */
  clients: Map<string, Client>;
  close(): Promise<void>;
}

/** A real aedes broker on a loopback TCP port that admits everyone (`port` 0: a free one). */
export async function startTestBroker(port = 0): Promise<TestBroker> {
  const clients = new Map<string, Client>();
  const broker = await Aedes.createBroker();
  broker.on('client', (c) => clients.set(c.id, c));
  const server: Server = createServer(broker.handle);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const actual = (server.address() as AddressInfo).port;
  let closed = false;
  return {
    url: `mqtt://127.0.0.1:${actual}`,
    port: actual,
    clients,
    async close() {
      if (closed) return;
      closed = true;
      await new Promise<void>((resolve) => broker.close(() => resolve()));
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** One outbox message as the fake cloud received it. */
export interface ReceivedOutboxMessage {
  robotId: string;
  /** The message's own JSON text (for a batch's message, the element as it stood in the batch). */
  raw: string;
  message: OutboxMessage;
  /** How many messages the publish that carried it had (1: sent alone). */
  publishSize: number;
}

/**
 * The cloud's side of the outbox on a test broker: records every message robots publish on
 * `…/outbox` and answers as `policy` says (`ack` by default; `silent` answers nothing; a
 * function decides per message, null for no answer).
 */
export class FakeCloud {
  readonly received: ReceivedOutboxMessage[] = [];
  /** Completed subscriptions to the outbox topics (one more after each reconnect). */
  subscriptions = 0;
  policy: 'ack' | 'silent' | ((m: ReceivedOutboxMessage) => OutboxAck | null) = 'ack';
  /**
   * Set: this cloud takes batches of up to that many messages (outbox protocol 2): its
   * acknowledgments say so, and a batch is answered in one publish. Unset: an older cloud.
   */
  batchMax: number | undefined;
  /** How many messages each publish received carried, in order. */
  readonly publishes: number[] = [];

  private constructor(readonly client: MqttClient) {}

  static async connect(url: string): Promise<FakeCloud> {
    const client = await mqtt.connectAsync(url, { protocolVersion: 4, clientId: `cloud_${randomBytes(6).toString('hex')}`, reconnectPeriod: 50, clean: true });
    const cloud = new FakeCloud(client);
    client.on('message', (topic, payload) => cloud.onMessage(topic, payload));
    await client.subscribeAsync(topics.allOutbox, { qos: 1 });
    cloud.subscriptions += 1;
    // A reconnect (the test restarted the broker) needs the subscription again.
    client.on('connect', () => {
      client.subscribeAsync(topics.allOutbox, { qos: 1 }).then(
        () => (cloud.subscriptions += 1),
        () => undefined,
      );
    });
    return cloud;
  }

  /** Message ids received so far, in arrival order (with repeats). */
  ids(): string[] {
    return this.received.map((r) => r.message.msg_id);
  }

  /** How many times `msgId` arrived. */
  count(msgId: string): number {
    return this.received.filter((r) => r.message.msg_id === msgId).length;
  }

  async send(robotId: string, ack: OutboxAck | string): Promise<void> {
    await this.client.publishAsync(topics.outboxAck(robotId), typeof ack === 'string' ? ack : JSON.stringify(ack), { qos: 1 });
  }

  async close(): Promise<void> {
    await this.client.endAsync(true);
  }

  private onMessage(topic: string, payload: Buffer): void {
    const t = parseRobotTopic(topic);
    if (t?.rest !== 'outbox') return;
    const text = payload.toString('utf8');
    const batch = this.batchMax !== undefined ? OutboxBatchSchema.safeParse(JSON.parse(text)) : undefined;
    // A batch's messages, each re-serialized from the parsed batch (key order kept).
    const raws = batch?.success ? batch.data.batch.map((m) => JSON.stringify(m)) : [text];
    this.publishes.push(raws.length);
    const answers: OutboxAck[] = [];
    for (const raw of raws) {
      const received: ReceivedOutboxMessage = { robotId: t.robotId, raw, message: OutboxMessageSchema.parse(JSON.parse(raw)), publishSize: raws.length };
      this.received.push(received);
      const answer = this.policy === 'ack' ? { msg_id: received.message.msg_id, ok: true as const } : this.policy === 'silent' ? null : this.policy(received);
      if (answer) answers.push(this.batchMax !== undefined ? { ...answer, batch_max: this.batchMax } : answer);
    }
    if (answers.length === 0) return;
    const ack = raws.length > 1 ? JSON.stringify({ acks: answers }) : answers[0]!;
    void this.send(t.robotId, ack).catch(() => undefined);
  }
}
