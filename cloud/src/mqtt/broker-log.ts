import { RobotIdSchema } from '@fleet/protocol';

/** `1795748449: New client connected from 127.0.0.1:39692 as rbt_… (p2, c1, k60, u'rbt_…').` */
const CONNECTED = /^\d+: New client connected from \S+ as (\S+) \(/;
/**
 * `Client rbt_… disconnected.`, `… closed its connection.`, `… has exceeded timeout, disconnecting.`,
 * `… been disconnected by administrative action.` (a password change, a disabled client),
 * `Socket error on client rbt_…, disconnecting.`; a refused login is `Client <unknown> …`.
 */
const DISCONNECTED = /^\d+: (?:Client (\S+) (?:.*disconnect|closed its connection)|Socket error on client (\S+), disconnecting)/;
/**
 * A broker cluster's lines end with the connection they are about: `[conn <node>/<n>]`, or
 * `[conn <node>]` for whatever connection a robot had on a node that died. mosquitto's have none.
 */
const CONNECTION = / \[conn ([^\s/\]]+)(?:\/([^\s/\]]+))?\]$/;

interface Session {
  up: boolean;
  node?: string;
  n?: string;
}

/**
 * Robots' connections as mosquitto logs them (notice lines on `$SYS/broker/log/N`, with
 * `log_dest topic`): per robot, whether the last line about it was a connect. Only robot ids
 * are kept (the cloud's own clients and refused logins are not), so it holds at most the fleet.
 */
export class BrokerConnectionLog {
  private readonly sessions = new Map<string, Session>();
  /** Whether any line reached this log (the operator's broker may not publish them). */
  seen = false;

  /** Reads one line; says which robot connected or left, if the line is about that. */
  read(line: string): { robotId: string; up: boolean } | null {
    this.seen = true;
    const connected = CONNECTED.exec(line);
    const disconnected = connected ? null : DISCONNECTED.exec(line);
    const id = connected?.[1] ?? disconnected?.[1] ?? disconnected?.[2];
    if (id === undefined || !RobotIdSchema.safeParse(id).success) return null;
    const up = connected !== null;
    const conn = CONNECTION.exec(line);
    const node = conn?.[1];
    const n = conn?.[2];
    if (!up && node !== undefined) {
      // A cluster's line about an earlier connection, read after the robot's next one came up
      // (on another node, or again on the same one), ends nothing.
      const now = this.sessions.get(id);
      if (now?.up && now.node !== undefined && (now.node !== node || (n !== undefined && now.n !== undefined && now.n !== n))) return null;
    }
    this.sessions.set(id, { up, ...(node !== undefined ? { node } : {}), ...(n !== undefined ? { n } : {}) });
    return { robotId: id, up };
  }

  /** Whether the robot's connection is up as logged; undefined when no line about it was read. */
  state(robotId: string): boolean | undefined {
    return this.sessions.get(robotId)?.up;
  }

  /** Forgets every robot (lines were missed: the reader's own connection was down). */
  clear(): void {
    this.sessions.clear();
  }
}
