import { EventEmitter } from 'node:events';
import mqtt, { type MqttClient } from 'mqtt';
import type { Aedes, AedesPublishPacket } from 'aedes';
import { disableNagle } from '@fleet/node-support';
import { mqttServers } from '@fleet/protocol';
import { retainedMessages } from '../mqtt/broker.js';

export interface LinkTransportEvents {
  /**
   * A message of one of the link's subscriptions. `retained` when the broker handed it over as a
   * retained message on subscribing; a live message never is (MQTT 3.1.1 clears the flag).
   */
  message: [topic: string, payload: Buffer, retained: boolean];
  /** The connection came back after it was lost: what was published meanwhile did not arrive. */
  reconnected: [];
}

/** How the robot link reaches the broker: its subscriptions, its publishes, whether it is up. */
export interface LinkTransport extends EventEmitter<LinkTransportEvents> {
  /** Whether a publish can reach the broker now. */
  readonly connected: boolean;
  subscribe(filters: string[], qos: 0 | 1): Promise<void>;
  publish(topic: string, payload: string, qos: 0 | 1): Promise<void>;
  /** No message is handed over after this resolves. */
  end(): Promise<void>;
}

/** An MQTT connection of the link's own: any broker (mosquitto shared by replicas, the embedded one in tests). */
export class MqttTransport extends EventEmitter<LinkTransportEvents> implements LinkTransport {
  private constructor(private readonly client: MqttClient) {
    super();
    disableNagle(client.stream);
    client.on('message', (topic, payload, packet) => this.emit('message', topic, payload, packet.retain));
    client.on('connect', () => {
      disableNagle(client.stream);
      this.emit('reconnected');
    });
  }

  static async connect(opts: { urls: readonly string[]; clientId: string; username?: string; password?: string }, onError: (err: Error) => void): Promise<MqttTransport> {
    // With a cluster's nodes, mqtt.js reconnects to the next one each time (clean session: the link resubscribes).
    const { url, servers } = mqttServers(opts.urls);
    const client = await mqtt.connectAsync(url, {
      ...(servers ? { servers } : {}),
      protocolVersion: 4,
      clientId: opts.clientId,
      clean: true,
      reconnectPeriod: 1000,
      ...(opts.username ? { username: opts.username } : {}),
      ...(opts.password ? { password: opts.password } : {}),
    });
    client.on('error', onError);
    return new MqttTransport(client);
  }

  get connected(): boolean {
    return this.client.connected;
  }

  async subscribe(filters: string[], qos: 0 | 1): Promise<void> {
    await this.client.subscribeAsync(filters, { qos });
  }

  async publish(topic: string, payload: string, qos: 0 | 1): Promise<void> {
    await this.client.publishAsync(topic, payload, { qos });
  }

  async end(): Promise<void> {
    await this.client.endAsync();
  }
}

/**
 * The embedded broker, in this process: the link subscribes and publishes on aedes itself. Over
 * a connection of its own every robot message was encoded by aedes and parsed by mqtt.js, every
 * acknowledgment and command encoded by mqtt.js and parsed by aedes, with a PUBACK each way. A
 * robot's publish still comes through its own connection, so the broker's authentication, topic
 * ACL and throttle apply to it as before; the link's publishes never passed them (its `$cloud`
 * client was let publish anywhere, unthrottled), and only this process can make them.
 *
 * Delivery is released as soon as the message is handed over, as mqtt.js acknowledged it as soon
 * as it emitted it: the handlers are not awaited. Holding aedes' delivery until a handler is done
 * would pace robots, but a handler that waits for its own acknowledgment's publish could then
 * wait forever for a delivery slot of the broker that the waiting handlers hold.
 */
export class InProcessTransport extends EventEmitter<LinkTransportEvents> implements LinkTransport {
  private readonly subscriptions = new Map<string, (packet: AedesPublishPacket, done: () => void) => void>();
  private ended = false;

  constructor(private readonly aedes: Aedes) {
    super();
  }

  get connected(): boolean {
    return !this.ended && !this.aedes.closed;
  }

  /** Every message is delivered whole and in order in this process: `qos` changes nothing. */
  async subscribe(filters: string[]): Promise<void> {
    if (!this.connected) throw new Error('the embedded broker is closed');
    for (const filter of filters) {
      if (this.subscriptions.has(filter)) continue;
      const deliver = (packet: AedesPublishPacket, done: () => void) => {
        // Released after this call, not inside it: releasing starts the next message aedes holds
        // back behind busy deliveries, from within this one, so a long backlog would run out of
        // stack (aedes defers its clients' deliveries for the same reason).
        queueMicrotask(done);
        // Between end() and aedes removing the subscription (on its next turn) nothing more is handed over.
        if (!this.ended) this.emit('message', packet.topic, Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload), false);
      };
      this.subscriptions.set(filter, deliver);
      await new Promise<void>((resolve) => this.aedes.subscribe(filter, deliver, resolve));
    }
    // aedes gives a client the retained messages when it subscribes; an in-process subscription
    // gets only live ones, so they are read here (a robot that connected before the link did).
    for await (const m of retainedMessages(this.aedes, filters)) {
      if (this.ended) return;
      this.emit('message', m.topic, m.payload, true);
    }
  }

  async publish(topic: string, payload: string, qos: 0 | 1): Promise<void> {
    if (!this.connected) throw new Error('the embedded broker is closed');
    // Resolves once aedes has handed the message to every subscriber (written to a robot's
    // connection, or queued for its persistent session); over a connection the broker's PUBACK,
    // sent before that, resolved it.
    await new Promise<void>((resolve, reject) =>
      this.aedes.publish({ cmd: 'publish', topic, payload: Buffer.from(payload), qos, retain: false, dup: false }, (err) => (err ? reject(err) : resolve())),
    );
  }

  async end(): Promise<void> {
    this.ended = true;
    const subscriptions = [...this.subscriptions];
    this.subscriptions.clear();
    await Promise.all(subscriptions.map(([filter, deliver]) => new Promise<void>((resolve) => this.aedes.unsubscribe(filter, deliver, resolve))));
  }
}
