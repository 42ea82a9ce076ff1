// Lightweight robots of `bench -- scale100k` (bench/scale100k.ts), thousands per process, forked
// with an IPC channel. Each speaks the robot side of the link as the agent does
// (agent/src/link/mqtt-link.ts) and nothing else: it connects to the first address of the list it
// was handed at enrollment with an offline last will, subscribes to its command and outbox-ack
// topics, publishes its retained online status, answers `stack.status` once per cmd_id, and keeps
// the reports it published until the cloud acknowledges them (its outbox). A lost connection is
// retried on the next address of its list after the agent's backoff (1 s doubling to 30 s, with
// jitter), and the reports not yet acknowledged are published again on the new connection.
//
// In: {type:'connect', robots:[{robot_id,password,urls}], concurrency}, {type:'reports', perSecond},
// {type:'mark', url}, {type:'stats'}, {type:'stop'}. Out: {type:'connected', ok, failed, errors},
// {type:'stats', ...} (see `stats()`), {type:'ready'}.
import { performance } from 'node:perf_hooks';
import mqtt, { type MqttClient } from 'mqtt';
import { topics } from '@fleet/protocol';
import { syntheticReport } from './lib/reports.js';

interface Robot {
  id: string;
  password: string;
  urls: string[];
  urlIndex: number;
  client: MqttClient | null;
  /** The address it is connected to (CONNACK, subscriptions and status done), or null. */
  on: string | null;
  attempts: number;
  lostAt: number | null;
  /** Reports published and not yet acknowledged, by msg_id. */
  pending: Map<string, string>;
  /** Answers by cmd_id: a command delivered again is not run again; its first answer is sent again, as the agent does. */
  answered: Map<string, string>;
}

const WORKER = Number(process.env.SCALE_WORKER ?? '0');
const robots: Robot[] = [];
const byId = new Map<string, Robot>();
let stopping = false;
let reportSeq = 0;
let reportsPublished = 0;
let republished = 0;
let acked = 0;
let duplicateAcks = 0;
let refusedAcks = 0;
let replies = 0;
let commandsDeliveredAgain = 0;
let reconnects = 0;
/** Why reconnects failed, by message (robot ids and ports left out), for the bench's diagnosis. */
const reconnectErrors = new Map<string, number>();
/** Robots marked as on the node about to die, and when each was connected again (ms after its loss). */
let marked: Set<Robot> = new Set();
const recovered = new Map<Robot, number>();
let markedAt = 0;

const send = (msg: Record<string, unknown>) => process.send?.(msg);

function backoffMs(attempt: number): number {
  const base = Math.min(30_000, 1000 * 2 ** Math.min(attempt, 5));
  return base * (0.5 + Math.random() * 0.5);
}

function onMessage(r: Robot, topic: string, payload: Buffer): void {
  if (topic === topics.command(r.id)) {
    let cmd: { cmd_id?: string; command?: string };
    try {
      cmd = JSON.parse(payload.toString('utf8')) as typeof cmd;
    } catch {
      return;
    }
    if (!cmd.cmd_id) return;
    const earlier = r.answered.get(cmd.cmd_id);
    if (earlier !== undefined) {
      commandsDeliveredAgain++;
      r.client?.publish(topics.commandReply(r.id), earlier, { qos: 1 });
      return;
    }
    const answer = JSON.stringify(
      cmd.command === 'stack.status'
        ? { cmd_id: cmd.cmd_id, ok: true, result: { stack: 'running', autonomous: false, pose: 'unknown' } }
        : { cmd_id: cmd.cmd_id, ok: false, error: { code: 'unsupported', message: `the lightweight bench robot does not run ${cmd.command}` } },
    );
    r.answered.set(cmd.cmd_id, answer);
    if (r.answered.size > 256) r.answered.delete(r.answered.keys().next().value!);
    replies++;
    r.client?.publish(topics.commandReply(r.id), answer, { qos: 1 });
    return;
  }
  if (topic === topics.outboxAck(r.id)) {
    let parsed: { msg_id?: string; ok?: boolean } | { acks: { msg_id?: string; ok?: boolean }[] };
    try {
      parsed = JSON.parse(payload.toString('utf8')) as typeof parsed;
    } catch {
      return;
    }
    for (const ack of 'acks' in parsed ? parsed.acks : [parsed]) {
      if (!ack.msg_id) continue;
      if (!r.pending.delete(ack.msg_id)) {
        duplicateAcks++;
        continue;
      }
      if (ack.ok === false) refusedAcks++;
      acked++;
    }
  }
}

/** One connection attempt to the robot's current address; resolves when it is fully up, rejects when refused or closed first. */
function connectOnce(r: Robot): Promise<void> {
  const url = r.urls[r.urlIndex % r.urls.length]!;
  return new Promise((resolve, reject) => {
    const client = mqtt.connect(url, {
      protocolVersion: 4,
      clientId: r.id,
      username: r.id,
      password: r.password,
      clean: true,
      keepalive: 60,
      reconnectPeriod: 0,
      connectTimeout: 120_000,
      resubscribe: false,
      will: { topic: topics.status(r.id), payload: Buffer.from(JSON.stringify({ online: false, at: Date.now() })), qos: 1, retain: true },
    });
    r.client = client;
    let up = false;
    client.on('error', () => undefined);
    client.on('message', (topic, payload) => onMessage(r, topic, payload));
    client.once('close', () => {
      if (!up) {
        reject(new Error(`connection to ${url} closed before it was up`));
        return;
      }
      r.on = null;
      r.client = null;
      r.lostAt ??= performance.now();
      if (!stopping) scheduleReconnect(r);
    });
    client.once('connect', () => {
      void (async () => {
        try {
          await client.subscribeAsync([topics.command(r.id), topics.outboxAck(r.id)], { qos: 1 });
          const status = { online: true, runtime_version: 'bench-light', platform: 'bench', capabilities: [], at: Date.now() };
          await client.publishAsync(topics.status(r.id), JSON.stringify(status), { qos: 1, retain: true });
          up = true;
          r.on = url;
          r.attempts = 0;
          if (r.lostAt !== null) {
            if (marked.has(r) && !recovered.has(r)) recovered.set(r, performance.now() - markedAt);
            r.lostAt = null;
          }
          // The outbox: what the cloud has not acknowledged goes again on the new connection.
          for (const payload of r.pending.values()) {
            republished++;
            client.publish(topics.outbox(r.id), payload, { qos: 1 });
          }
          resolve();
        } catch (err) {
          client.end(true);
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      })();
    });
  });
}

function scheduleReconnect(r: Robot): void {
  // The agent moves to the next address after a failed connect or a lost connection.
  r.urlIndex++;
  const delay = backoffMs(r.attempts++);
  setTimeout(() => {
    if (stopping) return;
    reconnects++;
    connectOnce(r).catch((err: unknown) => {
      const why = (err instanceof Error ? err.message : String(err)).replace(/rbt_\w+/g, 'rbt_…').replace(/:\d+/g, ':…').slice(0, 120);
      reconnectErrors.set(why, (reconnectErrors.get(why) ?? 0) + 1);
      r.client?.end(true);
      r.client = null;
      if (!stopping) scheduleReconnect(r);
    });
  }, delay).unref();
}

async function connectAll(list: { robot_id: string; password: string; urls: string[] }[], concurrency: number): Promise<void> {
  let next = 0;
  let ok = 0;
  let failed = 0;
  const errors: string[] = [];
  await Promise.all(
    Array.from({ length: Math.max(1, concurrency) }, async () => {
      while (next < list.length) {
        const c = list[next++]!;
        const r: Robot = { id: c.robot_id, password: c.password, urls: c.urls, urlIndex: 0, client: null, on: null, attempts: 0, lostAt: null, pending: new Map(), answered: new Map() };
        robots.push(r);
        byId.set(r.id, r);
        try {
          await connectOnce(r);
          ok++;
        } catch (err) {
          failed++;
          if (errors.length < 5) errors.push(`${r.id}: ${(err as Error).message}`);
          r.client?.end(true);
        }
      }
    }),
  );
  send({ type: 'connected', ok, failed, errors });
}

let reportTimer: NodeJS.Timeout | null = null;
/** Reports at `perSecond` from random connected robots, in ticks of 100 ms. */
function startReports(perSecond: number): void {
  if (reportTimer) clearInterval(reportTimer);
  if (perSecond <= 0) return;
  let owed = 0;
  reportTimer = setInterval(() => {
    owed += perSecond / 10;
    while (owed >= 1) {
      owed--;
      const r = robots[Math.floor(Math.random() * robots.length)];
      if (!r) return;
      const body = syntheticReport(reportSeq++, `s${WORKER}x`);
      const payload = JSON.stringify({ msg_id: `episode.report:${body.id}`, kind: 'episode.report', body });
      r.pending.set(`episode.report:${body.id}`, payload);
      reportsPublished++;
      // A robot that is not connected keeps it in its outbox; it goes out on the next connection.
      r.client?.publish(topics.outbox(r.id), payload, { qos: 1 });
    }
  }, 100);
}

function stats(): Record<string, unknown> {
  const onUrl: Record<string, number> = {};
  let connected = 0;
  let pending = 0;
  for (const r of robots) {
    pending += r.pending.size;
    if (r.on) {
      connected++;
      onUrl[r.on] = (onUrl[r.on] ?? 0) + 1;
    }
  }
  const times = [...recovered.values()].sort((a, b) => a - b);
  return {
    type: 'stats',
    robots: robots.length,
    connected,
    onUrl,
    pending,
    reportsPublished,
    republished,
    acked,
    duplicateAcks,
    refusedAcks,
    replies,
    commandsDeliveredAgain,
    reconnects,
    reconnectErrors: Object.fromEntries(reconnectErrors),
    marked: marked.size,
    recovered: times.length,
    recoveredMaxMs: times.at(-1) ?? null,
    recoveredP50Ms: times.length ? times[Math.floor(times.length / 2)] : null,
    // Ids of reports sent (the bench checks the index holds each once): the tag and count say them.
    reportTag: `s${WORKER}x`,
    reportCount: reportSeq,
  };
}

process.on('message', (msg: { type: string; robots?: { robot_id: string; password: string; urls: string[] }[]; concurrency?: number; perSecond?: number; url?: string }) => {
  if (msg.type === 'connect') void connectAll(msg.robots ?? [], msg.concurrency ?? 64);
  else if (msg.type === 'reports') startReports(msg.perSecond ?? 0);
  else if (msg.type === 'mark') {
    marked = new Set(robots.filter((r) => r.on === msg.url));
    recovered.clear();
    markedAt = performance.now();
    send({ type: 'marked', count: marked.size });
  } else if (msg.type === 'stats') send(stats());
  else if (msg.type === 'stop') {
    stopping = true;
    if (reportTimer) clearInterval(reportTimer);
    void Promise.all(robots.map((r) => (r.client ? r.client.endAsync(true).catch(() => undefined) : Promise.resolve()))).then(() => process.exit(0));
  }
});
send({ type: 'ready' });
