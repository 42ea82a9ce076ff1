/* global process, Buffer, URL */
// Lightweight robots of the fleet benchmark (bench/fleet.ts), many per process: plain mqtt.js
// clients that speak the robot side of the link as the agent does (agent/src/link/mqtt-link.ts)
// and nothing else: connect with the enrolled credentials and an offline last will, subscribe to
// the command and outbox-ack topics, publish the retained online status with capabilities, and
// answer `stack.status` on the command topic with a reply carrying its cmd_id (other commands are
// declined as unsupported). No outbox, no recording, no control socket: the cloud's cost per
// connected robot is what is measured.
//
// Forked with an IPC channel. Messages in: {type:'connect', url, creds:[{robot_id,password}],
// concurrency, sources?}, {type:'stats'}, {type:'stop'}. Out: {type:'progress', ok, failed} (every
// 1,000 settled), {type:'connected', ok, failed, errors, ms}, {type:'stats', open, closed, replies}.
//
// `sources`: local addresses (127.0.0.x) the clients bind to in turn. Every connection to one
// broker address from one source address needs its own ephemeral port (net.ipv4.ip_local_port_range,
// about 28,000 by default), so more robots than that on one machine need several sources; every
// 127/8 address routes on the loopback interface. mqtt.js does not pass `localAddress` on to
// net.connect, so the TCP stream is built here.
import net from 'node:net';
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

/** An mqtt.js client on a TCP stream from `localAddress` (or the default), connected (CONNACK received). */
function connectClient(url, localAddress, options) {
  const { hostname, port } = new URL(url);
  const host = hostname.replace(/^\[|\]$/g, '');
  const stream = () => net.createConnection({ host, port: Number(port || 1883), ...(localAddress ? { localAddress } : {}) });
  return new Promise((resolve, reject) => {
    const client = new mqtt.MqttClient(stream, { ...options, protocol: 'mqtt', host, port: Number(port || 1883) });
    client.on('error', () => undefined); // an error after the CONNACK shows as a close, counted in `closed`
    const settle = (err) => {
      client.off('connect', onConnect);
      client.off('error', settle);
      client.off('close', onClose);
      if (!err) return resolve(client);
      client.end(true);
      reject(err);
    };
    const onConnect = () => settle(null);
    const onClose = () => settle(new Error('connection closed before CONNACK'));
    client.on('connect', onConnect);
    client.on('error', settle);
    client.on('close', onClose);
  });
}

async function connectOne(url, localAddress, { robot_id: id, password }) {
  const offline = Buffer.from(JSON.stringify({ online: false, at: Date.now() }));
  const client = await connectClient(url, localAddress, {
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
    const sources = Array.isArray(msg.sources) ? msg.sources : [];
    await Promise.all(
      Array.from({ length: Math.max(1, msg.concurrency) }, async () => {
        while (next < msg.creds.length) {
          const i = next++;
          const c = msg.creds[i];
          const source = sources.length ? sources[i % sources.length] : undefined;
          try {
            await connectOne(msg.url, source, c);
            ok++;
          } catch (err) {
            failed++;
            if (errors.length < 5) errors.push(`${c.robot_id}${source ? ` from ${source}` : ''}: ${err?.message ?? String(err)}`);
          }
          if ((ok + failed) % 1000 === 0) process.send({ type: 'progress', ok, failed });
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
