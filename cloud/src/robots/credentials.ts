import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '@fleet/protocol';
import { hashSecret, newId, newSecret } from '../ids.js';
import type { SecretBox } from '../secret-box.js';
import type { Store } from '../store/index.js';
import type { RobotLink } from './link.js';

/** Where a robot's credential rotation stands after a delivery attempt. */
export type RotationState = 'completed' | 'pending';

/** Closes a robot's live connection to the broker (the embedded broker; an external one cannot be told). */
export interface BrokerSessions {
  disconnect(robotId: string): boolean;
}

/**
 * Robot accounts on an external broker that keeps its own (mosquitto's dynamic security plugin,
 * `mqtt/dynsec.ts`): the embedded broker asks the store instead and needs none of this.
 */
export interface RobotBrokerAccounts {
  /** A robot was enrolled with this secret. */
  enrolled(robotId: string, password: string): Promise<void>;
  /** A rotation was acknowledged: only this secret works from now on, and the live connection is closed. */
  rotated(robotId: string, password: string): Promise<void>;
  /** De-enrolled: refused from now on, the live connection closed. */
  revoked(robotId: string): Promise<void>;
}

/** What the /v1 routes need for enrollment, de-enrollment and credential rotation. */
export interface FleetAdmin {
  /** Tells the broker about a robot just enrolled with this secret (an external broker's account). */
  enrolled?(robotId: string, password: string): Promise<void>;
  /** Delivers a requested rotation now if the robot is connected; says where it stands. */
  rotate(robotId: string): Promise<RotationState>;
  /** Drops the robot's live broker connection, so that its credentials are checked again at once. */
  disconnect(robotId: string): void | Promise<void>;
}

export interface CredentialRotatorOptions {
  store: Store;
  clock: Clock;
  /** Seals the pending secret, which is sent again until the robot acknowledges it. */
  secrets: SecretBox;
  /** Sends `credentials.rotate` and waits for the robot's answer. */
  link: Pick<RobotLink, 'send'>;
  sessions: BrokerSessions | null;
  /** With an external broker that keeps robot accounts (mosquitto's dynamic security). */
  accounts?: RobotBrokerAccounts | null;
  logger: FastifyBaseLogger;
}

/**
 * Rotates robots' broker passwords without a human copying a secret. A rotation is noted in the
 * store first; when the robot is connected (now, or at its next connection) the cloud makes one
 * new secret for the rotation (kept hashed for the broker and sealed to be sent again) and sends
 * it on the robot's own command topic. The robot stores it durably and answers; only then does
 * the new hash replace the old one and the robot's connection is closed, so it reconnects with
 * the new secret and the old one is refused from then on. Until then both work, and a lost
 * answer sends the same secret again: a robot never holds a secret the broker refuses. The
 * secret is never logged.
 */
export class CredentialRotator implements FleetAdmin {
  /** One delivery per robot at a time: two secrets in flight could leave the robot with the one the cloud dropped. */
  private readonly running = new Map<string, Promise<RotationState>>();

  constructor(private readonly opts: CredentialRotatorOptions) {}

  rotate(robotId: string): Promise<RotationState> {
    const current = this.running.get(robotId);
    if (current) return current;
    const run = this.deliver(robotId).finally(() => this.running.delete(robotId));
    this.running.set(robotId, run);
    return run;
  }

  async enrolled(robotId: string, password: string): Promise<void> {
    await this.opts.accounts?.enrolled(robotId, password);
  }

  /** De-enrollment: an external broker's account is disabled (which closes the connection), the embedded broker's connection closed. */
  async disconnect(robotId: string): Promise<void> {
    if (this.opts.accounts) {
      await this.opts.accounts.revoked(robotId);
      return;
    }
    this.closeConnection(robotId);
  }

  private closeConnection(robotId: string): void {
    if (!this.opts.sessions) {
      this.opts.logger.warn({ robot_id: robotId }, 'no embedded broker: the external broker keeps the robot connected until it reconnects');
      return;
    }
    this.opts.sessions.disconnect(robotId);
  }

  /** The robot (re)connected: a pending rotation goes out now. */
  robotOnline(robotId: string): void {
    this.rotate(robotId).catch((err: unknown) => this.opts.logger.error({ err, robot_id: robotId }, 'credential rotation failed'));
  }

  /** Waits for the deliveries in flight (shutdown). */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.running.values()]);
  }

  private async deliver(robotId: string): Promise<RotationState> {
    const { store, clock, logger } = this.opts;
    const robot = await store.robots.getById(robotId);
    if (!robot || robot.deenrolledAt !== null || robot.rotationRequestedAt === null) return 'completed';
    if (!robot.connected) return 'pending';
    let password: string;
    let hash: string;
    if (robot.pendingSecretSealed !== null && robot.pendingPasswordHash !== null) {
      // An earlier attempt may have reached the robot: the same secret again, never a second one.
      password = this.opts.secrets.open(robot.pendingSecretSealed);
      hash = robot.pendingPasswordHash;
    } else {
      password = newSecret('rsec');
      hash = hashSecret(password);
      if (!(await store.robots.setPendingPassword(robotId, hash, this.opts.secrets.seal(password)))) return 'pending';
    }
    let ok = false;
    try {
      const reply = await this.opts.link.send(robotId, 'credentials.rotate', newId('cmd'), { password });
      ok = reply.ok;
      if (!reply.ok) logger.warn({ robot_id: robotId, code: reply.error.code, reason: reply.error.message }, 'robot declined a credential rotation; it stays pending');
    } catch (err) {
      // Offline or no answer in time: the old secret still works, and the next connection retries.
      logger.warn({ robot_id: robotId, err: { message: (err as Error).message } }, 'credential rotation not acknowledged; it stays pending');
    }
    if (!ok) return 'pending';
    if (this.opts.accounts) {
      // mosquitto keeps one password per client: the new one replaces the old only now that the
      // robot has stored it, before the store says so (a failure here leaves the rotation
      // pending with the old secret still working on the broker, and it is delivered again).
      try {
        await this.opts.accounts.rotated(robotId, password);
      } catch (err) {
        logger.error({ robot_id: robotId, err: { message: (err as Error).message } }, 'the broker did not take the new robot secret; the rotation stays pending');
        return 'pending';
      }
      return (await store.robots.completeRotation(robotId, hash, clock.now())) ? 'completed' : 'pending';
    }
    if (!(await store.robots.completeRotation(robotId, hash, clock.now()))) {
      // The robot may have reconnected with the new secret before its answer was read: the
      // broker's authentication completed the rotation then.
      const now = await store.robots.getById(robotId);
      return now && now.deenrolledAt === null && now.rotationRequestedAt === null && now.mqttPasswordHash === hash ? 'completed' : 'pending';
    }
    logger.info({ robot_id: robotId }, 'robot credentials rotated; closing its connection so that it reconnects with the new secret');
    this.closeConnection(robotId);
    return 'completed';
  }
}

/** Without an MQTT link (tests of the HTTP layer): rotations stay pending, nothing is connected. */
export const offlineFleetAdmin: FleetAdmin = {
  enrolled: () => Promise.resolve(),
  rotate: () => Promise.resolve('pending'),
  disconnect: () => undefined,
};
