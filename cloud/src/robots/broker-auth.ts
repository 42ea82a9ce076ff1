import { timingSafeEqual } from 'node:crypto';
import type { Client } from 'aedes';
import { parseRobotTopic, type Clock } from '@fleet/protocol';
import { hashSecret } from '../ids.js';
import type { FailedLoginLimiter } from '../login-limit.js';
import type { BrokerHooks } from '../mqtt/broker.js';
import type { PublishThrottle } from '../mqtt/throttle.js';
import type { Store } from '../store/index.js';

/** The username of the cloud's own MQTT client (a link with a connection of its own); it may publish and subscribe anywhere. */
export const CLOUD_MQTT_USERNAME = '$cloud';

const ROBOT_PUBLISH = new Set(['status', 'cmd/reply', 'outbox', 'sync/request']);
const ROBOT_SUBSCRIBE = new Set(['cmd', 'outbox/ack', 'sync']);

function refuse(code: 3 | 4 | 5, message: string) {
  return Object.assign(new Error(message), { returnCode: code });
}

function equalSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The client's address as the broker's socket sees it. */
function addressOf(client: Client): string | undefined {
  return (client.conn as { remoteAddress?: string } | undefined)?.remoteAddress;
}

/**
 * Broker authentication and ACL. A robot connects with client id = username = its robot id and
 * its password (issued at enrollment or by a rotation, stored hashed); a de-enrolled robot is
 * refused. It may publish only its own status, command
 * replies, outbox and sync requests, and subscribe only to its own commands, outbox
 * acknowledgments and sync messages (assignments, grants, deferrals). With `failures`, each
 * refused login counts against the client's address, and an address over the limit is refused
 * (CONNACK 3, server unavailable: clients back off and retry) before its password is checked.
 */
export function robotBrokerHooks(
  store: Store,
  /** The cloud client's secret; null when no client may log in as the cloud (its link works inside the broker). */
  cloudPassword: string | null,
  log: (msg: string, extra: object) => void,
  opts: {
    throttle?: PublishThrottle<Client>;
    clock: Clock;
    failures?: FailedLoginLimiter;
    /** The cloud account's username (default CLOUD_MQTT_USERNAME; a cluster node takes the account file's). */
    cloudUsername?: string;
  },
): BrokerHooks {
  const { clock } = opts;
  const cloudUsername = opts.cloudUsername ?? CLOUD_MQTT_USERNAME;
  const cloudClients = new WeakSet<Client>();
  return {
    authenticate(client, username, password, done) {
      const pass = password?.toString('utf8') ?? '';
      // The cloud's own client is let in whatever its address did: robots (a simulator) may share it.
      if (username === cloudUsername && cloudPassword !== null && equalSecret(pass, cloudPassword)) {
        cloudClients.add(client);
        done(null, true);
        return;
      }
      const address = addressOf(client);
      const failures = address === undefined ? undefined : opts.failures;
      const wait = failures?.retryAfterS(address!) ?? null;
      if (wait !== null) {
        log('mqtt connection refused: too many failed logins from this address', { client_id: client.id, address, retry_after_s: wait });
        done(refuse(3, 'too many failed logins'), false);
        return;
      }
      const failed = (err: ReturnType<typeof refuse>) => {
        // Counted before the answer: the next attempt from the address sees this failure.
        const counted = failures ? failures.failed(address!) : Promise.resolve();
        void counted.then(() => done(err, false));
      };
      if (username === cloudUsername) {
        failed(refuse(4, 'bad credentials'));
        return;
      }
      if (!username || client.id !== username) {
        log('mqtt connection refused: client id must equal the robot id', { client_id: client.id });
        failed(refuse(4, 'client id must equal username'));
        return;
      }
      const check = async (): Promise<boolean> => {
        const robot = await store.robots.getById(username);
        if (!robot) return false;
        if (robot.deenrolledAt !== null) {
          log('mqtt connection refused: the robot is de-enrolled', { client_id: client.id });
          return false;
        }
        const hash = hashSecret(pass);
        if (equalSecret(hash, robot.mqttPasswordHash)) return true;
        // The secret of a running rotation: the robot stored it, so its answer was lost on the
        // way. Holding it is the acknowledgment; from now on only this secret works.
        if (robot.pendingPasswordHash !== null && equalSecret(hash, robot.pendingPasswordHash)) {
          return store.robots.completeRotation(robot.id, robot.pendingPasswordHash, clock.now());
        }
        return false;
      };
      check().then(
        (ok) => {
          if (ok) done(null, true);
          else {
            log('mqtt connection refused: bad robot credentials', { client_id: client.id });
            failed(refuse(4, 'bad credentials'));
          }
        },
        (err: unknown) => done(Object.assign(err instanceof Error ? err : new Error(String(err)), { returnCode: 3 as const }), false),
      );
    },
    authorizePublish(client, packet, callback) {
      // The cloud's own client is never throttled: it carries every robot's commands and acks.
      if (!client || cloudClients.has(client)) return callback(null);
      const decide = () => {
        const t = parseRobotTopic(packet.topic);
        if (t && t.robotId === client.id && ROBOT_PUBLISH.has(t.rest)) return callback(null);
        log('mqtt publish refused', { client_id: client.id, topic: packet.topic });
        callback(new Error('not authorized'));
      };
      // Refused publishes go through the bucket too: flooding a forbidden topic is no way around
      // it. A publish from a connection that is already closed is its will (aedes authorizes it
      // on close): it passes at once, and the throttle drops what it still held for that client.
      if (opts.throttle && !client.closed) opts.throttle.admit(client, packet.payload?.length ?? 0, decide);
      else decide();
    },
    authorizeSubscribe(client, sub, callback) {
      if (cloudClients.has(client)) return callback(null, sub);
      const t = parseRobotTopic(sub.topic);
      if (t && t.robotId === client.id && ROBOT_SUBSCRIBE.has(t.rest)) return callback(null, sub);
      log('mqtt subscribe refused', { client_id: client.id, topic: sub.topic });
      // A null subscription answers SUBACK 0x80 (failure) and keeps the connection.
      callback(null, null);
    },
  };
}
