import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import mqtt from 'mqtt';
import type { Aedes } from 'aedes';
import type { FastifyBaseLogger } from 'fastify';
import {
  mqttServers,
  CommandReplySchema,
  parseBoundedJson,
  parseRobotTopic,
  RobotIdSchema,
  RobotStatusSchema,
  topics,
  type Clock,
  type CommandReply,
  type OutboxAck,
  type RobotCommand,
  type RobotCommandName,
  type Scheduler,
  type SyncMessage,
  type TimerHandle,
} from '@fleet/protocol';
import { ApiError } from '../errors.js';
import { BrokerConnectionLog } from '../mqtt/broker-log.js';
import { BROKER_LOG_TOPIC } from '../mqtt/dynsec-config.js';
import { robotStatusEvent } from '../rules/events.js';
import type { Store } from '../store/index.js';
import { InProcessTransport, MqttTransport, type LinkTransport } from './link-transport.js';

interface Pending {
  resolve: (reply: CommandReply) => void;
  timer: TimerHandle;
}

/** Largest MQTT payload the cloud parses from a robot; larger ones are dropped and logged. */
const MAX_ROBOT_PAYLOAD = 256 * 1024;

/** Where the presence snapshot of a starting replica ends (see `presenceSnapshot`). */
const SNAPSHOT_TOPIC = 'fleet/v1/cloud/snapshot';

/**
 * The broker's own view of robot connections: the embedded broker, which runs in this process.
 * Behind mosquitto the link reads the broker's log topic instead (`brokerLog`).
 */
export interface BrokerSessions {
  /** Whether the client has a live connection now. */
  isConnected(clientId: string): boolean;
  /** Calls `listener` with the client id of each connection that ends; returns the unsubscribe. */
  onDisconnect(listener: (clientId: string) => void): () => void;
}

/**
 * The cloud's MQTT client: keeps robot presence and sends commands, waiting for the reply with
 * the same `cmd_id`. It has a connection of its own to an external broker and works inside the
 * embedded one (`inProcess`, robots/link-transport.ts). Presence is what the cloud saw of a
 * robot's connection, not what the robot says: a status `online: true` counts only while the
 * robot's connection is up (the embedded broker's sessions, mosquitto's log of connects and
 * disconnects), and a connection that ends turns the robot offline whether or not it left a
 * will. Several cloud replicas can each run one; a reply reaches the replica that waits for it
 * because every replica subscribes to all replies and ignores ids it does not wait for. With
 * `shareGroup` (an external broker shared by replicas) outbox messages and sync requests come
 * through MQTT shared subscriptions, so each is handled by one replica; every replica writes
 * every status, in order.
 */
export class RobotLink extends EventEmitter<{
  /** A robot's status turned it from offline to online (a pending credential rotation goes out). */
  robotOnline: [robotId: string];
  /** A status changed a robot's presence or recording state: a robot.status event was logged for the organization. */
  statusLogged: [orgId: string];
}> {
  private transport: LinkTransport | null = null;
  private readonly pending = new Map<string, Pending>();
  /** Presence snapshots in flight (awaited by `stop`, so none writes after the store closed). */
  private readonly snapshots = new Set<Promise<void>>();
  /** Per robot, the status being written (the next one waits for it). */
  private readonly statusChains = new Map<string, Promise<void>>();
  /** Behind mosquitto: robots' connects and disconnects as the broker logged them. */
  private readonly brokerLog = new BrokerConnectionLog();
  private brokerLogWarned = false;
  private stopSessions: (() => void) | null = null;
  /** Robots being asked whether they are there (see `probe`). */
  private readonly probing = new Set<string>();
  /**
   * The handlers of robots' messages: every outbox message (the outbox router), every sync
   * request (grant and assignment requests). Each message is handed over as it comes, its
   * handler's failure logged; neither transport waits for a handler before the next message.
   * What the link only tells of goes out as events instead.
   */
  onOutbox: ((robotId: string, payload: Buffer) => Promise<void>) | null = null;
  onSyncRequest: ((robotId: string, payload: Buffer) => Promise<void>) | null = null;

  private get scheduler(): Scheduler {
    return this.opts.scheduler;
  }

  constructor(
    private readonly opts: {
      /**
       * The broker the link connects to (and its account), unless it is `inProcess`: one address,
       * or a cluster's nodes, the first tried first and the next at each reconnect.
       */
      urls: readonly string[];
      username?: string;
      password?: string;
      /**
       * The embedded broker, in this process: the link subscribes and publishes on it directly,
       * without a connection of its own (`url` and the account go unused).
       */
      inProcess?: Aedes;
      store: Store;
      clock: Clock;
      /** Command and snapshot timeouts. */
      scheduler: Scheduler;
      logger: FastifyBaseLogger;
      commandTimeoutMs: number;
      /**
       * Subscribe to statuses, outboxes and sync requests as `$share/<group>/…` (an external
       * broker with several replicas); unset on the embedded broker (aedes has no shared subscriptions).
       */
      shareGroup?: string;
      /** How long a starting replica waits for the retained statuses (presence snapshot). */
      snapshotTimeoutMs?: number;
      /** The embedded broker's connections: presence follows them exactly. */
      sessions?: BrokerSessions;
      /**
       * Follow robots' connects and disconnects in mosquitto's log topic (BROKER_LOG_TOPIC): a
       * robot whose connection ends goes offline without a will, and one whose connection this
       * link saw end cannot come back online by a status alone.
       */
      brokerLog?: boolean;
    },
  ) {
    super();
  }

  async start(): Promise<void> {
    if (this.opts.inProcess && this.opts.shareGroup) throw new Error('the embedded broker has no shared subscriptions');
    const transport: LinkTransport = this.opts.inProcess
      ? new InProcessTransport(this.opts.inProcess)
      : await MqttTransport.connect(
          {
            urls: this.opts.urls,
            clientId: `cloud_${randomBytes(8).toString('hex')}`,
            ...(this.opts.username ? { username: this.opts.username } : {}),
            ...(this.opts.password ? { password: this.opts.password } : {}),
          },
          (err) => this.opts.logger.warn({ err }, 'mqtt client error'),
        );
    this.transport = transport;
    transport.on('message', (topic, payload, retained) => {
      if (topic === BROKER_LOG_TOPIC) return this.onBrokerLog(payload);
      // Behind an external broker retained messages are the presence snapshot's (below): it reads
      // them on a connection of its own and knows when it has read them all, so each is handled
      // once and a starting replica knows when presence is read.
      if (this.opts.shareGroup && retained) return;
      this.onMessage(topic, payload, retained).catch((err: unknown) => this.opts.logger.error({ err, topic }, 'robot message handling failed'));
    });
    // What was logged while this link was away is lost: robots are unknown again until seen.
    transport.on('reconnected', () => this.brokerLog.clear());
    this.stopSessions = this.opts.sessions?.onDisconnect((clientId) => this.connectionEnded(clientId)) ?? null;
    if (this.opts.brokerLog) {
      try {
        await transport.subscribe([BROKER_LOG_TOPIC], 0);
      } catch (err) {
        this.opts.logger.warn({ err, topic: BROKER_LOG_TOPIC }, 'the broker refused the cloud its log topic: a robot that leaves without a will stays shown connected');
      }
    }
    const share = this.opts.shareGroup;
    const shared = (filter: string) => (share ? `$share/${share}/${filter}` : filter);
    // Replies stay a plain subscription: the one replica that waits for a reply must get it, and
    // every replica ignores the ids it does not wait for. So do statuses: shared, two statuses of
    // one robot could go to two replicas and be written in either order (a robot left
    // `recording` after it went idle); every replica writing every status in its order ends on
    // the robot's last one. Statuses are few (connections and state changes), so that costs little.
    await transport.subscribe([topics.allStatus, topics.allCommandReplies, shared(topics.allOutbox), shared(topics.allSyncRequests)], 1);
    if (share) {
      await this.presenceSnapshot();
      // After a lost connection (a broker restart) statuses published meanwhile, and those sent
      // before the subscriptions were renewed, are only in the retained messages: read them again.
      transport.on('reconnected', () => {
        this.presenceSnapshot().catch((err: unknown) => this.opts.logger.warn({ err }, 'presence snapshot after a reconnect failed'));
      });
    }
  }

  /**
   * A replica that (re)connects to an external broker reads the retained statuses on a
   * connection of its own, so robots that changed while no replica (or not this one) was
   * connected are seen, and it knows when it has read them all: a marker published after the
   * subscription arrives after them (one client's messages keep their order) and ends the
   * snapshot. Only messages flagged retained count (live ones are the link's own subscription's).
   * It dates from when statuses were a shared subscription (which gets no retained messages
   * under the MQTT 5 rule); the end marker is why it stays.
   */
  private presenceSnapshot(): Promise<void> {
    const run = this.readRetainedStatuses().finally(() => this.snapshots.delete(run));
    this.snapshots.add(run);
    return run;
  }

  private async readRetainedStatuses(): Promise<void> {
    const id = randomBytes(8).toString('hex');
    const marker = `${SNAPSHOT_TOPIC}/${id}`;
    const { url, servers } = mqttServers(this.opts.urls);
    const client = await mqtt.connectAsync(url, {
      ...(servers ? { servers } : {}),
      protocolVersion: 4,
      clientId: `cloud_snapshot_${id}`,
      clean: true,
      reconnectPeriod: 0,
      ...(this.opts.username ? { username: this.opts.username } : {}),
      ...(this.opts.password ? { password: this.opts.password } : {}),
    });
    let statuses = 0;
    try {
      const done = new Promise<void>((resolve) => {
        const timer = this.scheduler.setTimeout(() => {
          this.opts.logger.warn({ statuses }, 'presence snapshot: the marker did not come back; going on with what arrived');
          resolve();
        }, this.opts.snapshotTimeoutMs ?? 10_000);
        client.on('message', (topic, payload, packet) => {
          if (topic === marker) {
            this.scheduler.clearTimeout(timer);
            resolve();
            return;
          }
          if (!packet.retain) return;
          statuses++;
          this.onMessage(topic, payload, true).catch((err: unknown) => this.opts.logger.error({ err, topic }, 'retained robot status handling failed'));
        });
      });
      await client.subscribeAsync([topics.allStatus, marker], { qos: 1 });
      await client.publishAsync(marker, '', { qos: 1 });
      await done;
      this.opts.logger.info({ statuses }, 'presence snapshot read');
      // This snapshot's own connection was logged before its subscription was made.
      if (this.opts.brokerLog && !this.brokerLog.seen && !this.brokerLogWarned) {
        this.brokerLogWarned = true;
        this.opts.logger.warn(
          { topic: BROKER_LOG_TOPIC },
          "no line of the broker's log reached the cloud (mosquitto needs `log_dest topic`, as `fleet-cloud broker-config` writes it): a robot that leaves without a will stays shown connected",
        );
      }
    } finally {
      await client.endAsync();
    }
  }

  get connected(): boolean {
    return this.transport?.connected ?? false;
  }

  async stop(): Promise<void> {
    for (const [, p] of this.pending) this.scheduler.clearTimeout(p.timer);
    this.pending.clear();
    this.stopSessions?.();
    this.stopSessions = null;
    await this.transport?.end();
    this.transport = null;
    await Promise.allSettled([...this.snapshots]);
    await Promise.allSettled([...this.statusChains.values()]);
  }

  /**
   * Publishes the command and resolves with the robot's reply; 504 `command_timeout` when none
   * comes in time (the robot may still act; a retry with the same cmd_id is answered from the
   * robot's memory, so it never acts twice).
   */
  async send(robotId: string, command: RobotCommandName, cmdId: string, args?: Record<string, unknown>): Promise<CommandReply> {
    const transport = this.transport;
    if (!transport?.connected) throw new ApiError('robot_offline', 'the cloud has no connection to the MQTT broker');
    const key = `${robotId}\n${cmdId}`;
    if (this.pending.has(key)) throw new ApiError('idempotency_key_in_use', 'this command id is already waiting for the robot');
    const msg: RobotCommand = { cmd_id: cmdId, command, sent_at: this.opts.clock.now(), ...(args ? { args } : {}) };
    const reply = new Promise<CommandReply>((resolve, reject) => {
      const timer = this.scheduler.setTimeout(() => {
        this.pending.delete(key);
        reject(new ApiError('command_timeout', `robot did not answer within ${this.opts.commandTimeoutMs} ms; retry with the same Idempotency-Key`));
      }, this.opts.commandTimeoutMs);
      this.pending.set(key, { resolve, timer });
    });
    try {
      // QoS 0: the reply is the acknowledgment that matters. A QoS 1 PUBACK from the broker (and
      // the robot's own PUBACK to the broker) would double the packets of every round trip and
      // add nothing: a command lost with a dropped connection ends in command_timeout, and the
      // caller's retry with the same id is safe (the robot never acts twice for one id).
      await transport.publish(topics.command(robotId), JSON.stringify(msg), 0);
    } catch (err) {
      const p = this.pending.get(key);
      if (p) this.scheduler.clearTimeout(p.timer);
      this.pending.delete(key);
      throw err;
    }
    return reply;
  }

  private async onMessage(topic: string, payload: Buffer, retained: boolean): Promise<void> {
    const t = parseRobotTopic(topic);
    if (!t) return;
    if (t.rest === 'outbox') {
      if (this.onOutbox) await this.onOutbox(t.robotId, payload);
      return;
    }
    if (t.rest === 'sync/request') {
      if (this.onSyncRequest) await this.onSyncRequest(t.robotId, payload);
      return;
    }
    if (payload.length > MAX_ROBOT_PAYLOAD) {
      this.opts.logger.warn({ robot_id: t.robotId, topic, bytes: payload.length }, 'dropped oversized robot message');
      return;
    }
    // A retained status is cleared with an empty payload.
    if (payload.length === 0) return;
    const parsed = parseBoundedJson(payload.toString('utf8'));
    if (!parsed.ok) {
      // A reply nested beyond the bounds never reaches an API response; its command times out.
      if (parsed.reason === 'invalid_json') this.opts.logger.warn({ robot_id: t.robotId, topic }, 'dropped malformed robot message (not JSON)');
      else this.opts.logger.warn({ robot_id: t.robotId, topic, reason: parsed.message }, 'dropped robot message beyond the JSON bounds');
      return;
    }
    const json = parsed.value;
    if (t.rest === 'status') return this.statusInOrder(t.robotId, () => this.onStatus(t.robotId, json, retained));
    if (t.rest === 'cmd/reply') return this.onReply(t.robotId, json);
  }

  /** A message to the broker itself (a cluster's control topic, QoS 1). */
  async publishToBroker(topic: string, payload: string): Promise<void> {
    if (!this.transport) throw new Error('robot link stopped');
    await this.transport.publish(topic, payload, 1);
  }

  /** Assignments, grants and deferrals for a robot (QoS 1). */
  async publishSync(robotId: string, msg: SyncMessage): Promise<void> {
    if (!this.transport) throw new Error('robot link stopped');
    await this.transport.publish(topics.sync(robotId), JSON.stringify(msg), 1);
  }

  /** The application-level acknowledgment of an outbox message, or of a batch's messages in one publish (QoS 1). */
  async publishAck(robotId: string, ack: OutboxAck | { acks: OutboxAck[] }): Promise<void> {
    if (!this.transport) throw new Error('robot link stopped');
    await this.transport.publish(topics.outboxAck(robotId), JSON.stringify(ack), 1);
  }

  /**
   * A robot's statuses are written in the order they came: each waits for the one before it
   * (a status handled while an earlier one is still being written, on another pooled database
   * connection, could otherwise land first and leave the older state in place).
   */
  private statusInOrder(robotId: string, write: () => Promise<void>): Promise<void> {
    const before = this.statusChains.get(robotId);
    const run = (before ?? Promise.resolve()).then(write);
    // The chain never rejects: the caller handles `run`'s failure (a status the store could not
    // write); a rejected tail nobody awaits would end the process as an unhandled rejection.
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    void tail.then(() => {
      if (this.statusChains.get(robotId) === tail) this.statusChains.delete(robotId);
    });
    this.statusChains.set(robotId, tail);
    return run;
  }

  /**
   * Whether the robot's connection is up as the cloud saw it: the embedded broker knows; behind
   * mosquitto, what this link read in the broker's log, undefined for a robot it has not seen
   * connect or leave (connected before this link subscribed, or no log reaches it).
   */
  private connectionUp(robotId: string): boolean | undefined {
    if (this.opts.sessions) return this.opts.sessions.isConnected(robotId);
    return this.brokerLog.state(robotId);
  }

  private onBrokerLog(payload: Buffer): void {
    const change = this.brokerLog.read(payload.toString('utf8'));
    if (change && !change.up) this.connectionEnded(change.robotId);
  }

  /** A robot's connection ended: it is offline, will or no will (unless it is back already). */
  private connectionEnded(clientId: string): void {
    if (!this.transport || !RobotIdSchema.safeParse(clientId).success) return;
    this.statusInOrder(clientId, async () => {
      if (this.connectionUp(clientId) !== true) await this.writePresence(clientId, false);
    }).catch((err: unknown) => this.opts.logger.error({ err, robot_id: clientId }, 'writing a closed robot connection failed'));
  }

  /**
   * A retained `online: true` of a robot shown offline that this link has not seen connect
   * (behind mosquitto: it may have come back while no replica listened, or left without a will
   * long ago) is checked with a read-only command: only the robot's own connection can answer
   * on its reply topic. An answer makes it online; none leaves it offline.
   */
  private probe(robotId: string): void {
    if (this.probing.has(robotId)) return;
    this.probing.add(robotId);
    this.send(robotId, 'stack.status', `presence_${randomBytes(8).toString('hex')}`)
      .then(
        () => this.statusInOrder(robotId, async () => {
          if (this.connectionUp(robotId) !== false) await this.writePresence(robotId, true);
        }),
        () => this.opts.logger.info({ robot_id: robotId }, 'a retained online status was not confirmed: the robot did not answer'),
      )
      .catch((err: unknown) => this.opts.logger.error({ err, robot_id: robotId }, 'writing a confirmed robot presence failed'))
      .finally(() => this.probing.delete(robotId));
  }

  /** Presence alone (the robot's other fields as they are), when the cloud saw it change. */
  private async writePresence(robotId: string, connected: boolean): Promise<void> {
    const before = await this.opts.store.robots.getById(robotId);
    if (!before || before.deenrolledAt !== null || before.connected === connected) return;
    const changed = await this.opts.store.robots.updateStatus(robotId, { connected, seenAt: this.opts.clock.now() }, robotStatusEvent);
    if (changed) this.emit('statusLogged', before.orgId);
    if (connected) this.emit('robotOnline', robotId);
  }

  private async onStatus(robotId: string, json: unknown, retained: boolean): Promise<void> {
    const parsed = RobotStatusSchema.safeParse(json);
    if (!parsed.success) {
      this.opts.logger.warn({ robot_id: robotId, issues: parsed.error.issues }, 'dropped malformed robot status');
      return;
    }
    const s = parsed.data;
    const before = await this.opts.store.robots.getById(robotId);
    if (!before || before.deenrolledAt !== null) return;
    // A robot's word that it is online counts only while the cloud sees its connection up: a
    // retained `online: true` outlives a robot that left without a will. Where the link has not
    // seen the connection (behind mosquitto, a robot connected before this replica listened), a
    // live status proves it (only a connected client publishes); a retained one keeps what the
    // store has, and one that would turn the robot online is checked first.
    const up = this.connectionUp(robotId);
    const online = s.online && (up ?? (retained ? before.connected : true));
    if (s.online && retained && up === undefined && !before.connected) this.probe(robotId);
    // Robots publish their status on every connection and state change, and every replica writes
    // every status: the store logs robot.status only when presence or the recording state
    // changed, once (the first writer), so the event stream costs per change, not per status. A
    // replica behind the others writes statuses the robot has since replaced: the robot's clock
    // (`at`) orders them, and a late one changes nothing (`statusApplies`, rules/status-order.ts).
    const changed = await this.opts.store.robots.updateStatus(
      robotId,
      {
        connected: online,
        ...(s.runtime_version !== undefined ? { runtimeVersion: s.runtime_version } : {}),
        ...(s.platform !== undefined ? { platform: s.platform } : {}),
        ...(s.capabilities !== undefined ? { capabilities: s.capabilities } : {}),
        ...(s.recording_state !== undefined ? { recordingState: s.recording_state } : {}),
        seenAt: this.opts.clock.now(),
        status: { at: s.at, online: s.online },
      },
      robotStatusEvent,
    );
    if (changed) this.emit('statusLogged', before.orgId);
    if (online && !before.connected) this.emit('robotOnline', robotId);
  }

  private onReply(robotId: string, json: unknown): void {
    const parsed = CommandReplySchema.safeParse(json);
    if (!parsed.success) {
      this.opts.logger.warn({ robot_id: robotId, issues: parsed.error.issues }, 'dropped malformed command reply');
      return;
    }
    const key = `${robotId}\n${parsed.data.cmd_id}`;
    const p = this.pending.get(key);
    if (!p) return;
    this.scheduler.clearTimeout(p.timer);
    this.pending.delete(key);
    p.resolve(parsed.data);
  }
}
