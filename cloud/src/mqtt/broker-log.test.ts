import { describe, expect, it } from 'vitest';
import { BrokerConnectionLog } from './broker-log.js';

// Lines as mosquitto 2.0.11 publishes them on $SYS/broker/log/N.
const ROBOT = 'rbt_aurzvorpsxendoxyz3ckqx6viq';
const OTHER = 'rbt_bbbbbbbbbbbbbbbbbbbbbbbbbb';

describe('BrokerConnectionLog', () => {
  it("follows a robot's connects and the ways mosquitto logs a connection's end", () => {
    const log = new BrokerConnectionLog();
    expect(log.state(ROBOT)).toBeUndefined();
    const ends = [
      `1795748449: Client ${ROBOT} disconnected.`,
      `1795748449: Client ${ROBOT} closed its connection.`,
      `1795748449: Client ${ROBOT} has exceeded timeout, disconnecting.`,
      `1795748744: Client ${ROBOT} been disconnected by administrative action.`,
      `1795748449: Socket error on client ${ROBOT}, disconnecting.`,
    ];
    for (const end of ends) {
      expect(log.read(`1795748449: New client connected from 127.0.0.1:39692 as ${ROBOT} (p2, c1, k60, u'${ROBOT}').`)).toEqual({ robotId: ROBOT, up: true });
      expect(log.state(ROBOT)).toBe(true);
      expect(log.read(end)).toEqual({ robotId: ROBOT, up: false });
      expect(log.state(ROBOT)).toBe(false);
    }
  });

  it('ignores refused logins, clients that are not robots and other lines', () => {
    const log = new BrokerConnectionLog();
    expect(log.seen).toBe(false);
    log.read(`1795748449: New client connected from 127.0.0.1:1 as ${OTHER} (p2, c1, k60, u'${OTHER}').`);
    for (const line of [
      '1795748449: Client <unknown> disconnected, not authorised.',
      '1795748449: New connection from 127.0.0.1:39706 on port 18832.',
      "1795748448: New client connected from 127.0.0.1:39680 as cloud_w (p2, c1, k60, u'fleet-cloud').",
      '1795748449: Client cloud_w disconnected.',
      `1795748449: Client ${OTHER} already connected, closing old connection.`,
    ]) {
      expect(log.read(line)).toBeNull();
    }
    expect(log.seen).toBe(true);
    expect(log.state(OTHER)).toBe(true);
    log.clear();
    expect(log.state(OTHER)).toBeUndefined();
  });
});
