/* global process */
// The webhooks benchmark's experiment on its own worker (bench/webhooks.ts): the real
// DeliveryWorker and egress client (built, cloud/dist) in a process of their own, as in the
// cloud but without its API, broker and event log, draining `count` queued deliveries over 25
// subscriptions at the cloud's concurrency to the benchmark's receiver, with the queues in
//   - `store: "sqlite"`: the real SQLite store on a file, opened and checkpointed as `serve`
//     does (each outcome durable before its queue moves on: the guarantee);
//   - `store: "memory"`: a Map that answers the worker's calls and writes nothing (the same
//     worker with its durable outcome taken out).
// Beside the bare loop's CPU per request (bench/bare-post-loop.js), the two tell how much of a
// delivery's cost is the worker and how much its outcome on disk. Warm-up rounds first, then
// the measured ones; prints one JSON line: per measured round, deliveries/s and CPU ms.
//
// Usage: node worker-drain.js '<json options>'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pino } from 'pino';
import { systemClock } from '@fleet/protocol';
import { EgressClient } from '../cloud/dist/egress/client.js';
import { SecretBox } from '../cloud/dist/secret-box.js';
import { openSqliteStore } from '../cloud/dist/store/sqlite/store.js';
import { DeliveryWorker } from '../cloud/dist/webhooks/delivery.js';

const { origin, caFile, count, concurrency, bodyBytes, warmup, rounds, store: kind } = JSON.parse(process.argv[2] ?? '{}');
const SUBSCRIPTIONS = 25;
const perSubscription = Math.ceil(count / SUBSCRIPTIONS);
const total = perSubscription * SUBSCRIPTIONS;
const payload = JSON.stringify({ note: 'x'.repeat(Math.max(0, bodyBytes - 11)) });
const secrets = SecretBox.random();
const sealed = secrets.seal('whsec_bench_0123456789abcdefghijklmnopqrstuv');
const egress = new EgressClient({ allowLoopback: true, ca: readFileSync(caFile, 'utf8') });
const subscriptions = Array.from({ length: SUBSCRIPTIONS }, (_, i) => ({ id: `wh_bench_${i}`, url: `${origin}/hook/bare/${i}` }));
// The receiver counts only deliveries whose event id does not start with bare_.
let events = 0;
const eventId = () => `bare_worker_${++events}`;

/** The WebhookStore calls the worker makes, answered from memory; nothing is written. */
function memoryStore() {
  const queues = new Map(subscriptions.map((s) => [s.id, []]));
  const held = new Set();
  const targets = new Map(subscriptions.map((s) => [s.id, { id: s.id, url: s.url, status: 'active', secretSealed: sealed, previousSecretSealed: null, previousSecretUntil: null }]));
  let id = 0;
  const head = (sub) => queues.get(sub)[0];
  const webhooks = {
    fanOut: async () => 0,
    claimDue: async (_now, limit) => {
      const heads = [];
      for (const [sub, queue] of queues) {
        if (heads.length >= limit) break;
        if (queue.length > 0 && !held.has(sub)) {
          held.add(sub);
          heads.push(queue[0]);
        }
      }
      return heads;
    },
    deliveryTarget: async (sub) => targets.get(sub),
    recordAndClaimNext: async (d) => {
      queues.get(d.subscriptionId).shift();
      const next = head(d.subscriptionId);
      if (!next) held.delete(d.subscriptionId);
      return next;
    },
    record: async (deliveryId) => {
      for (const [sub, queue] of queues) {
        if (queue[0]?.id === deliveryId) {
          queue.shift();
          held.delete(sub);
        }
      }
    },
    release: async (sub) => void held.delete(sub),
  };
  const fill = async () => {
    for (const s of subscriptions) {
      for (let i = 0; i < perSubscription; i++) {
        queues.get(s.id).push({ id: ++id, subscriptionId: s.id, eventId: eventId(), eventType: 'webhook.test', payload, state: 'pending', attempts: 0, nextAttemptAt: 0, lastStatus: null, lastError: null, deadLetteredAt: null, createdAt: 0, claim: 'memory' });
      }
    }
  };
  return { store: { webhooks }, fill, close: async () => undefined };
}

async function sqliteStore() {
  const dir = mkdtempSync(join(tmpdir(), 'fleet-worker-drain-'));
  const store = openSqliteStore(dir);
  store.startBackground();
  await store.orgs.create({ id: 'org_bench', name: 'bench', tier: 'enterprise', createdAt: Date.now() });
  for (const s of subscriptions) await store.webhooks.create({ id: s.id, orgId: 'org_bench', url: s.url, events: ['webhook.test'], secretSealed: sealed, createdAt: Date.now() }, SUBSCRIPTIONS);
  const fill = async () => {
    const now = Date.now() - 1;
    for (let i = 0; i < perSubscription; i++) for (const s of subscriptions) await store.webhooks.enqueue(s.id, { eventId: eventId(), eventType: 'webhook.test', payload }, now);
  };
  return {
    store,
    fill,
    close: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const queues = kind === 'memory' ? memoryStore() : await sqliteStore();
const outcomes = new Map();
const metrics = { webhookDelivery: (outcome) => outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1) };
const worker = new DeliveryWorker({ store: queues.store, secrets, egress, clock: systemClock, logger: pino({ level: 'warn' }), concurrency, metrics });

async function round() {
  await queues.fill();
  outcomes.clear();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const attempts = await worker.tick();
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(c0);
  if (attempts !== total || outcomes.get('delivered') !== total) {
    throw new Error(`worker drain: ${attempts} attempts of ${total}, outcomes ${JSON.stringify([...outcomes])}`);
  }
  return { perS: (total / ms) * 1000, cpuMs: (cpu.user + cpu.system) / 1000, count: total };
}

for (let r = 0; r < warmup; r++) await round();
const measured = [];
for (let r = 0; r < rounds; r++) measured.push(await round());
await egress.close();
await queues.close();
process.stdout.write(`${JSON.stringify(measured)}\n`);
