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

  it("hands each robot every node, starting at one picked from its id, so a fleet spreads over them", () => {
    const nodes = ['mqtt://a:1', 'mqtt://b:1', 'mqtt://c:1'];
    const firsts = new Map<string, number>();
    for (let i = 0; i < 3000; i++) {
      const list = brokerUrlsForRobot(`rbt_${i.toString(36)}`, nodes);
      expect([...list].sort()).toEqual(nodes);
      // A rotation of the configured order.
      const k = nodes.indexOf(list[0]!);
      expect(list).toEqual([...nodes.slice(k), ...nodes.slice(0, k)]);
      firsts.set(list[0]!, (firsts.get(list[0]!) ?? 0) + 1);
    }
    for (const n of nodes) expect(firsts.get(n)).toBeGreaterThan(800);
    expect(brokerUrlsForRobot('rbt_x', nodes)).toEqual(brokerUrlsForRobot('rbt_x', nodes));
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
