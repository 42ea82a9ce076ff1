import { EventEmitter } from 'node:events';
import mqtt, { type MqttClient } from 'mqtt';
import { disableNagle } from '@fleet/node-support';
import { mqttServer, topics, type Clock, type CommandReply, type RobotStatus } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { Credentials } from '../credentials.js';
import type { Scheduler, TimerHandle } from '../time.js';
import { reconnectDelay } from './backoff.js';

/** The status fields besides `online` and `at`, read at every publication. */
export type LinkStatusFields = Omit<RobotStatus, 'online' | 'at'>;

export interface MqttLinkOptions {
  credentials: Credentials;
  /** Broker addresses overriding the stored ones (one, or a cluster's nodes in the order to try them). */
  urls?: readonly string[];
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
  reconnectMinMs: number;
  reconnectMaxMs: number;
  keepaliveSeconds: number;
  status: () => LinkStatusFields;
  onCommand: (payload: Buffer) => void;
  /** An application-level acknowledgment of an outbox message (`…/outbox/ack`). */
  onOutboxAck?: (payload: Buffer) => void;
  /** A message on `…/sync` (assignments, grants, deferrals); the link subscribes to it only when given. */
  onSync?: (payload: Buffer) => void;
  random?: () => number;
}

/** CONNACK return codes (MQTT 3.1.1) of a broker that refuses the login: bad username or password, not authorized. */
const REFUSED_LOGIN = new Set([4, 5]);

/**
 * The robot's MQTT 3.1.1 connection: presence by a retained status plus a last will, commands in,
 * replies out, outbox messages out and their acknowledgments in, sync requests out and sync
 * messages (assignments, grants, deferrals) in, QoS 1 except command replies (QoS 0, see
 * publishReply). mqtt.js's fixed-period
 * reconnect is off; this link reconnects with exponential backoff and re-announces its status on
 * every connect (the broker may have lost retained messages when it restarted).
 *
 * With several broker addresses (a cluster's nodes), the first connect goes to the first; after
 * a connect fails or a connection is lost, the next attempt goes to the next address (wrapping
 * round), after the same backoff: the robots of a node that went away come back on the others,
 * spread by their lists and the jitter.
 *
 * Every connect tries the current password first. When the broker refuses it and a previous
 * password is held (a rotation was stored but the cloud never read the answer, so an external
 * broker still has the old one), the link connects with the previous one right away.
 */
export class MqttLink extends EventEmitter<{ connected: []; disconnected: []; passwordAccepted: [password: string] }> {
  private client: MqttClient | undefined;
  private attempt = 0;
  private reconnectTimer: TimerHandle | undefined;
  private stopping = false;
  private everConnected = false;
  private syncReady = false;
  private readonly robotId: string;
  private password: string;
  private previousPassword: string | undefined;
  /** The connect under way uses the previous password. */
  private attemptWithPrevious = false;
  /** The broker refused the login of the connect under way (CONNACK 4 or 5). */
  private loginRefused = false;
  private accepted: string | undefined;
  private readonly urls: readonly string[];
  /** Which of `urls` the connect under way (or the connection) uses. */
  private urlIndex = 0;

  constructor(private readonly opts: MqttLinkOptions) {
    super();
    this.robotId = opts.credentials.robot_id;
    this.password = opts.credentials.mqtt.password;
    this.previousPassword = opts.credentials.mqtt.previous_password;
    const mqttCreds = opts.credentials.mqtt;
    this.urls = opts.urls && opts.urls.length > 0 ? [...opts.urls] : (mqttCreds.urls ?? [mqttCreds.url]);
  }

  /**
   * The passwords for every later connect (a credential rotation stored them durably first): the
   * current one, and the one to fall back on while the current one has not worked yet. The live
   * connection stays as it is; the cloud closes it once it has the robot's answer.
   */
  setPassword(password: string, previous?: string): void {
    this.password = password;
    this.previousPassword = previous !== password ? previous : undefined;
  }

  /** The password the broker accepted at the last connect (undefined before the first). */
  get acceptedPassword(): string | undefined {
    return this.accepted;
  }

  get connected(): boolean {
    return this.client?.connected ?? false;
  }

  /**
   * The broker granted the `…/sync` subscription at the last connect. A broker whose ACL does not
   * know the sync topics yet refuses it (SUBACK 0x80); it would refuse `…/sync/request` too, and
   * aedes drops a connection that publishes where it may not, so the uploader then stays idle.
   */
  get syncAvailable(): boolean {
    return this.syncReady && this.connected;
  }

  /** The broker address of the connect under way, or of the connection. */
  get url(): string {
    return this.urls[this.urlIndex]!;
  }

  /** Starts connecting; returns at once. `connected` fires on every (re)connect. */
  start(): void {
    if (this.client) return;
    const { credentials, keepaliveSeconds } = this.opts;
    this.attemptWithPrevious = false;
    this.loginRefused = false;
    const client = mqtt.connect(this.url, {
      protocolVersion: 4,
      clientId: credentials.mqtt.client_id,
      username: credentials.mqtt.username,
      password: this.password,
      clean: true,
      keepalive: keepaliveSeconds,
      reconnectPeriod: 0,
      connectTimeout: 10_000,
      resubscribe: false,
      will: this.will(),
    });
    this.client = client;
    client.on('connect', () => this.onConnect(client));
    client.on('close', () => this.onClose());
    client.on('error', (err) => {
      const code = (err as { code?: unknown }).code;
      // mqtt.js reports a CONNACK refusal as an error with the return code, before the close.
      if (typeof code === 'number' && REFUSED_LOGIN.has(code)) this.loginRefused = true;
      this.opts.logger.warn({ err: { message: err.message, code }, with_previous_password: this.attemptWithPrevious }, 'mqtt error');
    });
    client.on('message', (topic, payload) => {
      if (topic === topics.command(this.robotId)) this.opts.onCommand(payload);
      else if (topic === topics.outboxAck(this.robotId)) this.opts.onOutboxAck?.(payload);
      else if (topic === topics.sync(this.robotId)) this.opts.onSync?.(payload);
    });
  }

  /** Resolves at the next connect, or at once if connected. */
  whenConnected(): Promise<void> {
    if (this.connected) return Promise.resolve();
    return new Promise((resolve) => this.once('connected', resolve));
  }

  /** Publishes the retained online status; a no-op while disconnected (connecting publishes it). */
  async publishStatus(): Promise<void> {
    const client = this.client;
    if (!client?.connected) return;
    const status: RobotStatus = { online: true, ...this.opts.status(), at: this.opts.clock.now() };
    await client.publishAsync(topics.status(this.robotId), JSON.stringify(status), { qos: 1, retain: true });
  }

  /**
   * Sends a command reply, QoS 0. While disconnected it is dropped, and so is one the connection
   * loses: the cloud's caller gets command_timeout, retries with the same id and gets the stored
   * answer (or, for a status read, reads again). A QoS 1 PUBACK would add two packets to every
   * command's round trip for a guarantee the retry already gives.
   */
  async publishReply(reply: CommandReply): Promise<void> {
    const client = this.client;
    if (!client?.connected) {
      this.opts.logger.warn({ cmd_id: reply.cmd_id }, 'reply not sent: not connected');
      return;
    }
    await client.publishAsync(topics.commandReply(this.robotId), JSON.stringify(reply), { qos: 0 });
  }

  /**
   * Publishes a durable outbox message (QoS 1); rejects while disconnected. The returned promise
   * is the broker's PUBACK, not the cloud's acknowledgment, which comes on `…/outbox/ack`.
   */
  async publishOutbox(payload: string): Promise<void> {
    const client = this.client;
    if (!client?.connected) throw new Error('not connected');
    await client.publishAsync(topics.outbox(this.robotId), payload, { qos: 1 });
  }

  /** Publishes a sync request (`…/sync/request`, QoS 1); rejects while disconnected. */
  async publishSyncRequest(payload: string): Promise<void> {
    const client = this.client;
    if (!client?.connected) throw new Error('not connected');
    await client.publishAsync(topics.syncRequest(this.robotId), payload, { qos: 1 });
  }

  /** Publishes the retained offline status, then disconnects (no last will on a clean end). */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.reconnectTimer !== undefined) this.opts.scheduler.clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    const client = this.client;
    if (!client) return;
    if (client.connected) {
      const offline: RobotStatus = { online: false, at: this.opts.clock.now() };
      try {
        await this.withTimeout(client.publishAsync(topics.status(this.robotId), JSON.stringify(offline), { qos: 1, retain: true }), 5_000);
      } catch (err) {
        this.opts.logger.warn({ err }, 'could not publish the offline status');
      }
      await this.withTimeout(client.endAsync(), 5_000).catch(() => client.end(true));
    } else {
      await client.endAsync(true);
    }
    this.client = undefined;
  }

  private will() {
    const offline: RobotStatus = { online: false, at: this.opts.clock.now() };
    return { topic: topics.status(this.robotId), payload: Buffer.from(JSON.stringify(offline)), qos: 1 as const, retain: true };
  }

  private onConnect(client: MqttClient): void {
    disableNagle(client.stream);
    this.attempt = 0;
    const withPrevious = this.attemptWithPrevious && this.previousPassword !== undefined;
    this.accepted = withPrevious ? this.previousPassword : this.password;
    if (withPrevious) {
      // The cloud still has the rotation pending: it sends the same new secret again on this connection.
      this.opts.logger.warn({ url: this.url }, 'connected with the previous password; the current one waits for the cloud to complete the rotation');
    } else if (this.previousPassword !== undefined) {
      this.previousPassword = undefined;
      this.emit('passwordAccepted', this.password);
    }
    this.opts.logger.info({ url: this.url, reconnect: this.everConnected, ...(withPrevious ? { with_previous_password: true } : {}) }, 'mqtt connected');
    this.everConnected = true;
    const ready = async () => {
      // Subscribed before `connected` fires, so the outbox never publishes without hearing the acks.
      await client.subscribeAsync([topics.command(this.robotId), topics.outboxAck(this.robotId)], { qos: 1 });
      // Subscribed before `connected` fires too, so the answer to the assignments request is heard.
      // Apart from the others: a refusal must not keep commands and the outbox from working.
      this.syncReady = false;
      if (this.opts.onSync) {
        try {
          await client.subscribeAsync(topics.sync(this.robotId), { qos: 1 });
          this.syncReady = true;
        } catch (err) {
          if (!client.connected) throw err;
          this.opts.logger.warn({ err: { message: (err as Error).message } }, 'the broker refused the sync topic; uploads wait for the next connect');
        }
      }
      await this.publishStatus();
    };
    ready().then(
      () => this.emit('connected'),
      (err: unknown) => {
        // The connection dropped under us; the close handler reconnects.
        this.opts.logger.warn({ err }, 'could not subscribe or announce after connecting');
      },
    );
  }

  private onClose(): void {
    if (this.stopping) return;
    const refused = this.loginRefused;
    this.loginRefused = false;
    if (this.everConnected && this.attempt === 0) {
      this.opts.logger.warn('mqtt connection lost');
      this.emit('disconnected');
    }
    if (this.reconnectTimer !== undefined) return;
    if (refused && !this.attemptWithPrevious && this.previousPassword !== undefined) {
      // Part of the same attempt: no backoff, and the next one starts with the current password again.
      this.opts.logger.warn('the broker refused the current password; connecting with the previous one');
      this.scheduleConnect(0, true);
      return;
    }
    const delay = reconnectDelay(this.attempt, this.opts.reconnectMinMs, this.opts.reconnectMaxMs, this.opts.random);
    this.attempt += 1;
    if (this.urls.length > 1) this.urlIndex = (this.urlIndex + 1) % this.urls.length;
    this.opts.logger.debug({ delay_ms: delay, attempt: this.attempt, url: this.url }, 'mqtt reconnect scheduled');
    this.scheduleConnect(delay, false);
  }

  private scheduleConnect(delay: number, withPrevious: boolean): void {
    this.reconnectTimer = this.opts.scheduler.setTimeout(() => {
      this.reconnectTimer = undefined;
      const client = this.client;
      if (!client || this.stopping) return;
      this.attemptWithPrevious = withPrevious && this.previousPassword !== undefined;
      this.loginRefused = false;
      client.options.password = this.attemptWithPrevious ? this.previousPassword : this.password;
      // The will's time is that of the attempt, so the cloud sees when presence was last claimed.
      client.options.will = this.will();
      if (this.urls.length > 1) aimAt(client, this.url);
      client.reconnect({ incomingStore: client.incomingStore, outgoingStore: client.outgoingStore });
    }, delay);
  }

  private withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const t = this.opts.scheduler.setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
      p.then(
        (v) => {
          this.opts.scheduler.clearTimeout(t);
          resolve(v);
        },
        (err: unknown) => {
          this.opts.scheduler.clearTimeout(t);
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
  }
}

/**
 * Points a client's next connect at another broker address: mqtt.js builds each connection's
 * socket from these options (the ones `mqtt.connect` parsed from the first address).
 */
function aimAt(client: MqttClient, url: string): void {
  const { host, port, protocol } = mqttServer(url);
  const options = client.options as MqttClient['options'] & { servername?: string };
  options.protocol = protocol;
  options.hostname = host;
  options.host = host;
  options.port = port;
  // TLS names the server it expects by the host; the previous address's name must not carry over.
  delete options.servername;
}
