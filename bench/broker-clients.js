/* global process, Buffer, URL */
// Robot-like MQTT clients of the broker comparison (bench/brokers.ts), many per process. Each one
// does what the agent's link does on connect (agent/src/link/mqtt-link.ts): MQTT 3.1.1, clean
// session, an offline last will (QoS 1, retained) on its status topic, a QoS 1 subscription to
// its command and outbox-ack topics, then a retained QoS 1 online status. All clients log in
// with one account and a client id of their own, so no broker needs thousands of accounts.
//
// Forked with an IPC channel. In: {type:'connect', url, username, password, ids, concurrency,
// root, sources?}, {type:'stop'}. Out: {type:'ready'}, {type:'progress', ok, failed} (every 1,000
// settled), {type:'connected', ok, failed, errors, ms, open}.
//
// `sources`: local addresses (127.0.0.x) the clients bind to in turn (mqtt.js does not pass
// `localAddress` on to net.connect, so the TCP stream is built here, as in bench/fleet-robots.js).
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import mqtt from 'mqtt';

const clients = [];
let closed = 0;

function connectClient(url, localAddress, options) {
  const { hostname, port } = new URL(url);
  const stream = () => net.createConnection({ host: hostname, port: Number(port || 1883), ...(localAddress ? { localAddress } : {}) });
  return new Promise((resolve, reject) => {
    const client = new mqtt.MqttClient(stream, { ...options, protocol: 'mqtt', host: hostname, port: Number(port || 1883) });
    client.on('error', () => undefined);
    const settle = (err) => {
      client.off('connect', onConnect);
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

async function connectOne(msg, localAddress, id) {
  const status = `${msg.root}/${id}/status`;
  const client = await connectClient(msg.url, localAddress, {
    protocolVersion: 4,
    clientId: id,
    username: msg.username,
    password: msg.password,
    clean: true,
    keepalive: 60,
    reconnectPeriod: 0,
    connectTimeout: 120_000,
    resubscribe: false,
    will: { topic: status, payload: Buffer.from(JSON.stringify({ online: false })), qos: 1, retain: true },
  });
  const granted = await client.subscribeAsync([`${msg.root}/${id}/cmd`, `${msg.root}/${id}/outbox/ack`], { qos: 1 });
  if (granted.some((g) => g.qos === 128)) throw new Error(`subscription refused (SUBACK 0x80)`);
  await client.publishAsync(status, JSON.stringify({ online: true, runtime_version: 'bench-brokers', at: Date.now() }), { qos: 1, retain: true });
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
        while (next < msg.ids.length) {
          const i = next++;
          const source = sources.length ? sources[i % sources.length] : undefined;
          try {
            await connectOne(msg, source, msg.ids[i]);
            ok++;
          } catch (err) {
            failed++;
            if (errors.length < 5) errors.push(`${msg.ids[i]}: ${err?.message ?? String(err)}`);
          }
          if ((ok + failed) % 1000 === 0) process.send({ type: 'progress', ok, failed });
        }
      }),
    );
    process.send({ type: 'connected', ok, failed, errors, ms: performance.now() - t0, open: clients.length - closed });
  } else if (msg.type === 'stop') {
    await Promise.all(clients.map((c) => c.endAsync(true).catch(() => undefined)));
    process.exit(0);
  }
});
process.send({ type: 'ready' });
