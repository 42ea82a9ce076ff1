/* global process, Buffer */
// Lightweight robots of the fleet benchmark (bench/fleet.ts), many per process: plain mqtt.js
// clients that speak the robot side of the link as the agent does (agent/src/link/mqtt-link.ts)
// and nothing else: connect with the enrolled credentials and an offline last will, subscribe to
// the command and outbox-ack topics, publish the retained online status with capabilities, and
// answer `stack.status` on the command topic with a reply carrying its cmd_id (other commands are
// declined as unsupported). No outbox, no recording, no control socket: the cloud's cost per
// connected robot is what is measured.
//
// Forked with an IPC channel. Messages in: {type:'connect', url, creds:[{robot_id,password}],
// concurrency}, {type:'stats'}, {type:'stop'}. Out: {type:'connected', ok, failed, errors, ms},
// {type:'stats', open, closed, replies}.
import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';

const TOPIC_ROOT = 'fleet/v1/robots';
const clients = [];
let closed = 0;
let replies = 0;

function reply(client, robotId, payload) {
  let cmd;
  try {
    cmd = JSON.parse(payload.toString('utf8'));
  } catch {
    return;
  }
  const answer =
    cmd.command === 'stack.status'
      ? { cmd_id: cmd.cmd_id, ok: true, result: { stack: 'running', autonomous: false, pose: 'unknown' } }
      : { cmd_id: cmd.cmd_id, ok: false, error: { code: 'unsupported', message: `the lightweight bench robot does not run ${cmd.command}` } };
  replies++;
  client.publish(`${TOPIC_ROOT}/${robotId}/cmd/reply`, JSON.stringify(answer), { qos: 1 });
}

async function connectOne(url, { robot_id: id, password }) {
  const offline = Buffer.from(JSON.stringify({ online: false, at: Date.now() }));
  const client = await mqtt.connectAsync(url, {
    protocolVersion: 4,
    clientId: id,
    username: id,
    password,
    clean: true,
    keepalive: 60,
    reconnectPeriod: 0,
    connectTimeout: 120_000,
    resubscribe: false,
    will: { topic: `${TOPIC_ROOT}/${id}/status`, payload: offline, qos: 1, retain: true },
  });
  client.stream.setNoDelay?.(true);
  const cmdTopic = `${TOPIC_ROOT}/${id}/cmd`;
  client.on('message', (topic, payload) => {
    if (topic === cmdTopic) reply(client, id, payload);
  });
  client.on('error', () => undefined);
  await client.subscribeAsync([cmdTopic, `${TOPIC_ROOT}/${id}/outbox/ack`], { qos: 1 });
  const status = { online: true, runtime_version: 'bench-light', platform: 'bench', capabilities: [], at: Date.now() };
  await client.publishAsync(`${TOPIC_ROOT}/${id}/status`, JSON.stringify(status), { qos: 1, retain: true });
  client.once('close', () => closed++);
  clients.push(client);
}

process.on('message', async (msg) => {
  if (msg.type === 'connect') {
    const t0 = performance.now();
    let next = 0;
    let ok = 0;
    let failed = 0;
    const errors = [];
    await Promise.all(
      Array.from({ length: Math.max(1, msg.concurrency) }, async () => {
        while (next < msg.creds.length) {
          const c = msg.creds[next++];
          try {
            await connectOne(msg.url, c);
            ok++;
          } catch (err) {
            failed++;
            if (errors.length < 5) errors.push(`${c.robot_id}: ${err?.message ?? String(err)}`);
          }
        }
      }),
    );
    process.send({ type: 'connected', ok, failed, errors, ms: performance.now() - t0 });
  } else if (msg.type === 'stats') {
    process.send({ type: 'stats', open: clients.length - closed, closed, replies });
  } else if (msg.type === 'stop') {
    await Promise.all(clients.map((c) => c.endAsync(true).catch(() => undefined)));
    process.exit(0);
  }
});
process.send({ type: 'ready' });
