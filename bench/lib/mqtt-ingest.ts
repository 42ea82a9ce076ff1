import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';
import type { CloudProcess } from '../../test/support/cloud.js';
import { outboxBatchPayload, topics, type EpisodeReport, type OutboxAck } from '@fleet/protocol';
import { BenchFailure } from './summary.js';

/**
 * Every robot publishes `perRobot` outbox reports (robot r's k-th is `make(r * perRobot + k)`),
 * `inFlight` unacknowledged each, and counts each msg_id's ack once (QoS 1 may deliver an ack
 * twice: `duplicates`). With `batch` > 1 a robot works as the agent does with a cloud that takes
 * batches (outbox protocol 2): the freed slots are refilled in publishes of up to `batch`
 * messages, and the cloud answers a batch in one publish. A refused report, a failed publish or
 * no new ack for `stallMs` fails the run; so does any report left unacknowledged.
 */
export async function publishReports(
  clients: readonly { id: string; c: mqtt.MqttClient }[],
  perRobot: number,
  inFlight: number,
  make: (i: number) => EpisodeReport,
  opts: { batch?: number; stallMs?: number } = {},
): Promise<{ acked: number; duplicates: number; ms: number; publishes: number }> {
  const batch = opts.batch ?? 1;
  const stallMs = opts.stallMs ?? 60_000;
  let acked = 0;
  let duplicates = 0;
  let publishes = 0;
  // Every robot's messages, serialized before the clock starts: the robots are other machines,
  // so building and serializing their reports is not the cloud's work and must not take the
  // cores the cloud is measured on (the store's own ingest, the baseline, parses no JSON at all).
  const messagesOf = clients.map((_, r) =>
    Array.from({ length: perRobot }, (_v, k) => {
      const body = make(r * perRobot + k);
      return JSON.stringify({ msg_id: `episode.report:${body.id}`, kind: 'episode.report', body });
    }),
  );
  let lastProgress = performance.now();
  const t0 = performance.now();
  await Promise.all(
    clients.map(({ id, c }, r) => {
      return new Promise<void>((resolve, reject) => {
        const seen = new Set<string>();
        let sent = 0;
        const window = Math.min(inFlight, perRobot);
        let free = window;
        const stall = setInterval(() => {
          if (performance.now() - lastProgress > stallMs) {
            clearInterval(stall);
            reject(new BenchFailure(`robot ${r}: no ack for ${stallMs / 1000} s (${seen.size} of ${perRobot} acked); the run is incomplete`));
          }
        }, 1000);
        const fail = (err: unknown) => {
          clearInterval(stall);
          reject(new BenchFailure(`robot ${r}: publish failed: ${(err as Error).message}`));
        };
        /**
         * Publishes the freed slots' worth of reports, `batch` at most per publish; while reports
         * are in flight it waits for a whole batch's worth of free slots, as the agent does.
         */
        const refill = () => {
          while (sent < perRobot) {
            const want = Math.min(batch, perRobot - sent);
            if (free === 0 || (free < want && free < window)) return;
            const n = Math.min(free, want);
            const messages = messagesOf[r]!.slice(sent, sent + n);
            sent += n;
            free -= n;
            publishes++;
            c.publishAsync(topics.outbox(id), n === 1 ? messages[0]! : outboxBatchPayload(messages), { qos: 1 }).catch(fail);
          }
        };
        c.on('message', (_t, payload) => {
          const parsed = JSON.parse(payload.toString()) as OutboxAck | { acks: OutboxAck[] };
          for (const ack of 'acks' in parsed ? parsed.acks : [parsed]) {
            if (!ack.ok) {
              clearInterval(stall);
              reject(new BenchFailure(`robot ${r}: report refused: ${JSON.stringify(ack)}`));
              return;
            }
            if (seen.has(ack.msg_id)) {
              duplicates++;
              continue;
            }
            seen.add(ack.msg_id);
            acked++;
            free++;
            lastProgress = performance.now();
          }
          if (seen.size === perRobot) {
            clearInterval(stall);
            resolve();
            return;
          }
          refill();
        });
        refill();
      });
    }),
  );
  const ms = performance.now() - t0;
  if (acked !== clients.length * perRobot) throw new BenchFailure(`MQTT ingest: ${acked} of ${clients.length * perRobot} reports acked`);
  return { acked, duplicates, ms, publishes };
}

/** Enrolls `robots` robots through `cloud` and connects each to the broker it was told, subscribed to its acks. */
/** Enrolls and connects `robots` robots in the organization of `key` (the cloud's admin key by default). */
export async function enrollRobots(cloud: CloudProcess, robots: number, key?: string): Promise<{ id: string; c: mqtt.MqttClient }[]> {
  const tokenRes = await cloud.fetch('/v1/robots/enrollment-tokens', { method: 'POST', json: { max_uses: robots }, ...(key ? { key } : {}) });
  if (tokenRes.status !== 201) throw new BenchFailure(`enrollment token: HTTP ${tokenRes.status} ${await tokenRes.text()}`);
  const { token } = (await tokenRes.json()) as { token: string };
  const clients: { id: string; c: mqtt.MqttClient }[] = [];
  for (let r = 0; r < robots; r++) {
    const res = await cloud.fetch('/v1/robots/enroll', { method: 'POST', key: null, json: { token } });
    if (res.status !== 201) throw new BenchFailure(`enroll: HTTP ${res.status} ${await res.text()}`);
    const e = (await res.json()) as { robot_id: string; mqtt: { url: string; password: string } };
    const c = await mqtt.connectAsync(e.mqtt.url, { protocolVersion: 4, clientId: e.robot_id, username: e.robot_id, password: e.mqtt.password, reconnectPeriod: 0 });
    await c.subscribeAsync(topics.outboxAck(e.robot_id), { qos: 1 });
    clients.push({ id: e.robot_id, c });
  }
  return clients;
}
