import mqtt from 'mqtt';
import { afterEach, describe, expect, test } from 'vitest';
import { startEmbeddedBroker, type EmbeddedBroker } from './broker.js';

/** Retained messages on exact topics come from the broker's own index; wildcards from aedes. */
describe('embedded broker retained messages', () => {
  let broker: EmbeddedBroker | undefined;
  const clients: mqtt.MqttClient[] = [];
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
    await broker?.close();
  });

  async function client(id: string): Promise<mqtt.MqttClient> {
    const c = await mqtt.connectAsync(broker!.url, { protocolVersion: 4, clientId: id, reconnectPeriod: 0 });
    clients.push(c);
    return c;
  }

  async function retainedOn(pattern: string, id: string): Promise<string[]> {
    const c = await client(id);
    const got: string[] = [];
    let marked = false;
    c.on('message', (topic, payload, packet) => {
      if (packet.retain) got.push(`${topic}=${payload.toString()}`);
      else if (payload.toString() === `marker-${id}`) marked = true;
    });
    await c.subscribeAsync(pattern, { qos: 1 });
    // A barrier instead of a window: the retained messages are streamed when the subscription is
    // made, before the SUBACK; a live message published after it, to a topic the pattern matches,
    // arrives after them.
    await c.publishAsync(pattern.replace('+', 'marker'), `marker-${id}`, { qos: 1, retain: false });
    await expect.poll(() => marked).toBe(true);
    return got.sort();
  }

  test('an exact subscription gets its retained message, a wildcard every match, an empty payload clears', async () => {
    broker = await startEmbeddedBroker({ host: '127.0.0.1', port: 0, hooks: { authenticate: (_c, _u, _p, done) => done(null, true) } });
    const pub = await client('pub');
    await pub.publishAsync('r/a/status', 'A', { qos: 1, retain: true });
    await pub.publishAsync('r/b/status', 'B', { qos: 1, retain: true });
    expect(await retainedOn('r/a/status', 's1')).toEqual(['r/a/status=A']);
    expect(await retainedOn('r/c/status', 's2')).toEqual([]);
    expect(await retainedOn('r/+/status', 's3')).toEqual(['r/a/status=A', 'r/b/status=B']);
    await pub.publishAsync('r/a/status', '', { qos: 1, retain: true });
    expect(await retainedOn('r/a/status', 's4')).toEqual([]);
    expect(await retainedOn('r/+/status', 's5')).toEqual(['r/b/status=B']);
  });
});
