import { connect as tcpConnect, type Socket } from 'node:net';
import mqtt, { type MqttClient } from 'mqtt';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock, topics } from '@fleet/protocol';
import { CLOUD_MQTT_USERNAME, robotBrokerHooks } from '../robots/broker-auth.js';
import type { Store } from '../store/index.js';
import { storeWithRobots } from '../test-support.js';
import { startEmbeddedBroker, type EmbeddedBroker } from './broker.js';
import { mosquittoConfFragment } from './dynsec-config.js';
import { MAX_MQTT_CONNECT_BYTES, MAX_MQTT_PACKET_BYTES, PacketSizeGuard } from './packet-size.js';

/** The fixed header of a packet: its type byte and the variable-length remaining length. */
function fixedHeader(type: number, remaining: number): Buffer {
  const bytes = [type];
  do {
    let b = remaining % 128;
    remaining = Math.floor(remaining / 128);
    if (remaining > 0) b |= 0x80;
    bytes.push(b);
  } while (remaining > 0);
  return Buffer.from(bytes);
}

describe('PacketSizeGuard', () => {
  it('follows packets across chunks, a length split between two of them included', () => {
    const guard = new PacketSizeGuard({ maxBytes: 300 });
    const small = Buffer.concat([fixedHeader(0x30, 200), Buffer.alloc(200)]);
    const big = Buffer.concat([fixedHeader(0x30, 400), Buffer.alloc(10)]);
    expect(guard.feed(small.subarray(0, 2))).toBeNull();
    expect(guard.feed(Buffer.concat([small.subarray(2), small, big.subarray(0, 2)]))).toBeNull();
    // The second length byte tells the size: refused before any of the body.
    expect(guard.feed(big.subarray(2, 3))).toBe(403);
  });

  it('holds the first packet to its own cap and the others to the packet cap', () => {
    const guard = new PacketSizeGuard({ maxBytes: 1000, maxFirstPacketBytes: 100 });
    expect(guard.feed(Buffer.concat([fixedHeader(0x10, 50), Buffer.alloc(50), fixedHeader(0x30, 900), Buffer.alloc(900)]))).toBeNull();
    expect(new PacketSizeGuard({ maxBytes: 1000, maxFirstPacketBytes: 100 }).feed(fixedHeader(0x10, 200))).toBe(203);
  });
});

describe('embedded broker packet size cap (real aedes, real mqtt.js clients)', () => {
  let store: Store;
  let broker: EmbeddedBroker;
  let robots: { id: string; password: string }[];
  const clients: MqttClient[] = [];
  const sockets: Socket[] = [];
  const oversized: { clientId: string | null; bytes: number }[] = [];
  const CLOUD_PASSWORD = 'cloud-secret-for-this-test';

  beforeEach(async () => {
    const clock = new ManualClock(Date.now());
    ({ store, robots } = await storeWithRobots(clock, 2));
    broker = await startEmbeddedBroker({
      host: '127.0.0.1',
      port: 0,
      hooks: robotBrokerHooks(store, CLOUD_PASSWORD, () => undefined, { clock }),
      onOversizedPacket: (clientId, bytes) => oversized.push({ clientId, bytes }),
    });
  });

  afterEach(async () => {
    for (const s of sockets.splice(0)) s.destroy();
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
    await broker.close();
    await store.close();
    oversized.length = 0;
  });

  async function connect(clientId: string, username: string, password: string): Promise<MqttClient> {
    const c = await mqtt.connectAsync(broker.url, { protocolVersion: 4, clientId, username, password, reconnectPeriod: 0, connectTimeout: 5000 });
    clients.push(c);
    return c;
  }

  function closed(c: MqttClient): Promise<void> {
    return new Promise((resolve) => (c.connected ? c.once('close', () => resolve()) : resolve()));
  }

  /** A raw TCP connection to the broker; resolves `closed` when the broker ends it. */
  async function rawSocket(): Promise<{ socket: Socket; closed: Promise<void> }> {
    const socket = tcpConnect(broker.port, '127.0.0.1');
    sockets.push(socket);
    socket.on('error', () => undefined);
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    return { socket, closed: ended };
  }

  /** A CONNECT packet (MQTT 3.1.1, clean session) with username and password. */
  function connectPacket(clientId: string, username: string, password: string): Buffer {
    const str = (s: string) => {
      const b = Buffer.from(s, 'utf8');
      const len = Buffer.alloc(2);
      len.writeUInt16BE(b.length);
      return Buffer.concat([len, b]);
    };
    const body = Buffer.concat([str('MQTT'), Buffer.from([4, 0b1100_0010, 0, 60]), str(clientId), str(username), str(password)]);
    return Buffer.concat([fixedHeader(0x10, body.length), body]);
  }

  it('is the value the generated mosquitto configuration sets', () => {
    expect(mosquittoConfFragment({ dynsecFile: 'd.json', pluginPath: 'p.so' })).toContain(`max_packet_size ${MAX_MQTT_PACKET_BYTES}\n`);
  });

  it('disconnects a robot that publishes an oversized packet, delivers nothing of it, and a normal publish still works', async () => {
    const [a] = robots as [{ id: string; password: string }];
    const cloud = await connect('cloud_test', CLOUD_MQTT_USERNAME, CLOUD_PASSWORD);
    const seen: { topic: string; bytes: number }[] = [];
    cloud.on('message', (topic, payload) => seen.push({ topic, bytes: payload.length }));
    await cloud.subscribeAsync(topics.allOutbox, { qos: 1 });

    const robot = await connect(a.id, a.id, a.password);
    const gone = closed(robot);
    robot.publish(topics.outbox(a.id), Buffer.alloc(MAX_MQTT_PACKET_BYTES + 1), { qos: 1 });
    await gone;
    expect(oversized).toEqual([{ clientId: a.id, bytes: expect.any(Number) as unknown }]);
    expect(oversized[0]!.bytes).toBeGreaterThan(MAX_MQTT_PACKET_BYTES);

    // The robot connects again and a message of a normal size goes through (the cloud's
    // subscription on its own connection was never touched).
    const again = await connect(a.id, a.id, a.password);
    await again.publishAsync(topics.outbox(a.id), Buffer.alloc(64 * 1024), { qos: 1 });
    await expect.poll(() => seen).toEqual([{ topic: topics.outbox(a.id), bytes: 64 * 1024 }]);
    expect(cloud.connected).toBe(true);
  });

  it('closes connections that announce a 200 MB packet as soon as its header arrives, many at once', async () => {
    const [a, b] = robots as [{ id: string; password: string }, { id: string; password: string }];
    const cloud = await connect('cloud_test', CLOUD_MQTT_USERNAME, CLOUD_PASSWORD);
    const seen: string[] = [];
    cloud.on('message', (topic) => seen.push(topic));
    await cloud.subscribeAsync(topics.allOutbox, { qos: 1 });

    // Two logged-in robots and 20 connections that never logged in each announce a 200 MB
    // packet and send only its first bytes: the broker cannot wait for the body to refuse it.
    const announce = fixedHeader(0x30, 200 * 1024 * 1024);
    const conns = [];
    for (const r of [a, b]) {
      const c = await rawSocket();
      c.socket.write(connectPacket(r.id, r.id, r.password));
      await new Promise<void>((resolve) => c.socket.once('data', () => resolve()));
      c.socket.write(Buffer.concat([announce, Buffer.alloc(1024)]));
      conns.push(c.closed);
    }
    for (let i = 0; i < 20; i++) {
      const c = await rawSocket();
      c.socket.write(Buffer.concat([fixedHeader(0x10, 200 * 1024 * 1024), Buffer.alloc(1024)]));
      conns.push(c.closed);
    }
    await Promise.all(conns);
    expect(oversized).toHaveLength(22);
    expect(oversized.filter((o) => o.clientId !== null).map((o) => o.clientId).sort()).toEqual([a.id, b.id].sort());

    // A CONNECT (the first packet) over its own smaller cap is refused too.
    const big = await rawSocket();
    big.socket.write(fixedHeader(0x10, MAX_MQTT_CONNECT_BYTES));
    await big.closed;

    const ok = await connect(a.id, a.id, a.password);
    await ok.publishAsync(topics.outbox(a.id), 'fine', { qos: 1 });
    await expect.poll(() => seen).toEqual([topics.outbox(a.id)]);
  });
});
