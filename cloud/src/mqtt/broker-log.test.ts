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

  it("a cluster's line about a robot's earlier connection does not end the one that came up after it", () => {
    const log = new BrokerConnectionLog();
    const up = (conn: string) => `1795748449: New client connected from 127.0.0.1:1 as ${ROBOT} (p2, c1, k0, u'${ROBOT}'). [conn ${conn}]`;
    const down = (conn: string) => `1795748450: Client ${ROBOT} disconnected. [conn ${conn}]`;
    // Moved from node b to node a; b's line about the old connection comes last.
    expect(log.read(up('b/k1.1'))).toEqual({ robotId: ROBOT, up: true });
    expect(log.read(up('a/k2.7'))).toEqual({ robotId: ROBOT, up: true });
    expect(log.read(down('b/k1.1'))).toBeNull();
    expect(log.read(down('b'))).toBeNull();
    expect(log.state(ROBOT)).toBe(true);
    // Again on the same node: the end of the connection before is not this one's.
    expect(log.read(up('a/k2.8'))).toEqual({ robotId: ROBOT, up: true });
    expect(log.read(down('a/k2.7'))).toBeNull();
    expect(log.state(ROBOT)).toBe(true);
    // Its own end, or its node found dead, does end it.
    expect(log.read(down('a/k2.8'))).toEqual({ robotId: ROBOT, up: false });
    expect(log.state(ROBOT)).toBe(false);
    log.read(up('a/k2.9'));
    expect(log.read(down('a'))).toEqual({ robotId: ROBOT, up: false });
    // A line without a connection (mosquitto's), or about a robot whose connect this log missed, applies as read.
    log.read(up('c/k3.1'));
    expect(log.read(`1795748451: Client ${ROBOT} closed its connection.`)).toEqual({ robotId: ROBOT, up: false });
    log.clear();
    expect(log.read(down('b/k1.1'))).toEqual({ robotId: ROBOT, up: false });
  });
});
