import { describe, expect, it } from 'vitest';
import { BrokerUrlListSchema, brokerUrlsForRobot, mqttServers } from './broker-urls.js';

describe('broker address lists', () => {
  it('splits a comma-separated list and takes one already split', () => {
    expect(BrokerUrlListSchema.parse('mqtt://a:1883, mqtts://b:8883')).toEqual(['mqtt://a:1883', 'mqtts://b:8883']);
    expect(BrokerUrlListSchema.parse(['mqtt://a:1883'])).toEqual(['mqtt://a:1883']);
  });

  it('refuses an empty list, another scheme, a repeat and too many', () => {
    for (const bad of ['', ' , ', 'http://a', 'mqtt://a:1,mqtt://a:1', Array.from({ length: 17 }, (_, i) => `mqtt://n${i}:1883`).join(',')]) {
      expect(BrokerUrlListSchema.safeParse(bad).success, bad).toBe(false);
    }
  });

  it('hands each robot every node in an order of its own: a fleet spreads over the nodes, and so do the robots of a node that goes away', () => {
    const nodes = Array.from({ length: 7 }, (_, i) => `mqtt://127.0.0.1:${35881 + i}`);
    const firsts = new Map<string, number>();
    const next = new Map<string, Map<string, number>>();
    const robots = 14_000;
    for (let i = 0; i < robots; i++) {
      const list = brokerUrlsForRobot(`rbt_${i.toString(36)}`, nodes);
      expect([...list].sort()).toEqual([...nodes].sort());
      firsts.set(list[0]!, (firsts.get(list[0]!) ?? 0) + 1);
      const after = next.get(list[0]!) ?? new Map<string, number>();
      after.set(list[1]!, (after.get(list[1]!) ?? 0) + 1);
      next.set(list[0]!, after);
    }
    // About 2,000 robots start on each node...
    for (const n of nodes) expect(firsts.get(n)).toBeGreaterThan(0.85 * (robots / 7));
    // ...and when it goes away, its robots' next addresses are the six others, about 333 each
    // (a rotation of one configured order would send them all to one node).
    for (const n of nodes) {
      const after = next.get(n)!;
      expect(after.size).toBe(6);
      for (const count of after.values()) expect(count).toBeGreaterThan(0.7 * (firsts.get(n)! / 6));
    }
    expect(brokerUrlsForRobot('rbt_x', nodes)).toEqual(brokerUrlsForRobot('rbt_x', [...nodes].reverse()));
    expect(brokerUrlsForRobot('rbt_x', ['mqtt://only:1'])).toEqual(['mqtt://only:1']);
  });

  it("gives mqtt.js every node as its servers, with each scheme's default port", () => {
    expect(mqttServers(['mqtt://a:1'])).toEqual({ url: 'mqtt://a:1' });
    expect(mqttServers(['mqtt://a', 'mqtts://b'])).toEqual({
      url: 'mqtt://a',
      servers: [
        { host: 'a', port: 1883, protocol: 'mqtt' },
        { host: 'b', port: 8883, protocol: 'mqtts' },
      ],
    });
  });
});
