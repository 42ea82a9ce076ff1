import { Readable } from 'node:stream';
import type { AedesPublishPacket, Client, Subscription } from 'aedes';
import { Redis } from 'ioredis';
import mqemitterRedis from 'mqemitter-redis';
import redisPersistence from 'aedes-persistence-redis';
import { fnv1a, RobotIdSchema, type Clock, type Scheduler, type TimerHandle } from '@fleet/protocol';
import { retainedMessages, startEmbeddedBroker, type BrokerHooks, type EmbeddedBroker } from './broker.js';
import { BROKER_LOG_TOPIC } from './dynsec-config.js';
import { installWillStore } from './will-store.js';

/**
 * A broker cluster: aedes nodes on one Redis (mqemitter-redis carries every publish to every
 * node, aedes-persistence-redis keeps retained messages, wills, sessions and subscriptions), each
 * node answering logins and ACLs from the cloud's own store. aedes clusters this way by design
 * (session takeover across nodes, wills of a node that died published by another); what the
 * cloud needs beyond that lives here, on the cluster's own `$fleet/cluster/…` topics:
 *
 * - shared subscriptions (`$share/<group>/<filter>`, which aedes lacks): each member's node keeps
 *   the group's members (retained, one message per node and client) and forwards a message to a
 *   member only if that member is the group's choice for the message's topic (rendezvous hashing
 *   over the members whose nodes are alive), so each message reaches one replica and a robot's
 *   messages keep going to the same one while the members stay;
 * - connection lines in mosquitto's log format on `$SYS/broker/log/N`, so the cloud follows
 *   robots' connects and disconnects as it does behind mosquitto, with a line for every robot of
 *   a node that died (its connections ended with it);
 * - a disconnect topic: the cloud closes a robot's connection wherever it is (a de-enrollment, a
 *   rotated password);
 * - no stale will: a will of a dead node's robot that is connected again elsewhere is dropped;
 * - no zombie node: a node found dead that was only stalled is told so and drops its connections.
 */

export const CLUSTER_TOPIC = '$fleet/cluster';
/** Retained: `$fleet/cluster/share/<node>/<client id>` → `{"group":…,"filters":[…]}`; empty when gone. */
const MEMBERS_TOPIC = `${CLUSTER_TOPIC}/share`;
/** Payload: a client id whose connection every node closes (the cloud's account only). */
export const CLUSTER_DISCONNECT_TOPIC = `${CLUSTER_TOPIC}/disconnect`;
/**
 * Payload: a node the cluster found dead (silent for three heartbeats). The cluster has ended its
 * connections (their wills published, their robots shown offline, its share members cleared), so
 * a node that reads its own id here was only stalled, and closes every connection it still holds:
 * its clients connect again, to it or another node, and are seen anew.
 */
const DEAD_TOPIC = `${CLUSTER_TOPIC}/dead`;
const SYS = '$SYS/';

/** Whether the MQTT topic filter `filter` matches `topic` (`+` one level, `#` the rest). */
export function topicMatches(filter: string, topic: string): boolean {
  const f = filter.split('/');
  const t = topic.split('/');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '#') return true;
    if (i >= t.length) return false;
    if (f[i] !== '+' && f[i] !== t[i]) return false;
  }
  return f.length === t.length;
}

/** `$share/<group>/<filter>` split, or null for any other filter. */
export function parseShared(topic: string): { group: string; filter: string } | null {
  if (!topic.startsWith('$share/')) return null;
  const rest = topic.slice('$share/'.length);
  const slash = rest.indexOf('/');
  if (slash <= 0 || slash === rest.length - 1) return null;
  return { group: rest.slice(0, slash), filter: rest.slice(slash + 1) };
}

/**
 * Which nodes are alive: heard (heartbeat or birth) within three heartbeats, as aedes judges
 * wills, but counted against this node's own heartbeat as it comes back through Redis, not
 * against the wall clock: a node whose event loop or Redis link stalled (a connection storm, a
 * long garbage collection) hears every heartbeat late, its own too, and must not then find the
 * whole cluster dead. A node is silent only while this node heard itself.
 */
export class NodeLiveness {
  private readonly heard = new Map<string, number>();

  constructor(
    private readonly self: string,
    private readonly clock: Clock,
    private readonly heartbeatMs: number,
  ) {}

  saw(node: string): void {
    this.heard.set(node, this.clock.now());
  }

  /** When this node last heard itself through the cluster (now, until its first heartbeat came back). */
  private reference(): number {
    return this.heard.get(this.self) ?? this.clock.now();
  }

  alive(node: string): boolean {
    if (node === this.self) return true;
    const at = this.heard.get(node);
    return at !== undefined && this.reference() - at <= 3 * this.heartbeatMs;
  }

  /** Nodes heard once and silent since (each is reported once, then forgotten). */
  takeDead(): string[] {
    const dead = [...this.heard.keys()].filter((n) => !this.alive(n));
    for (const n of dead) this.heard.delete(n);
    return dead;
  }

  /** The live node with the smallest id: it speaks for the cluster about a dead node. */
  leader(): string {
    return [...new Set([this.self, ...[...this.heard.keys()].filter((n) => this.alive(n))])].sort()[0]!;
  }
}

interface Member {
  node: string;
  clientId: string;
  group: string;
  filters: string[];
}

/** Shared subscriptions across the nodes (see the module comment). */
export class ClusterShares {
  /** Every member the cluster knows, by `<node>/<client id>`. */
  private readonly members = new Map<string, Member>();
  /** This node's members, by client id. */
  private readonly local = new Map<string, { group: string; filters: Set<string> }>();

  constructor(
    private readonly self: string,
    private readonly liveness: NodeLiveness,
    private readonly publishRetained: (topic: string, payload: string) => void,
  ) {}

  /** A membership message (live or retained) from any node. */
  apply(topic: string, payload: Buffer): void {
    const key = topic.slice(MEMBERS_TOPIC.length + 1);
    const slash = key.indexOf('/');
    if (slash <= 0) return;
    if (payload.length === 0) {
      this.members.delete(key);
      return;
    }
    try {
      const m = JSON.parse(payload.toString('utf8')) as { group?: unknown; filters?: unknown };
      if (typeof m.group !== 'string' || !Array.isArray(m.filters) || !m.filters.every((f) => typeof f === 'string')) return;
      this.members.set(key, { node: key.slice(0, slash), clientId: key.slice(slash + 1), group: m.group, filters: m.filters });
    } catch {
      // Not ours to read: only nodes publish here.
    }
  }

  /** A cloud client's subscription: `$share/<group>/<filter>` becomes `<filter>`, with this client a member of the group. */
  subscribe(client: Client, sub: Subscription): Subscription {
    const shared = parseShared(sub.topic);
    if (!shared) return sub;
    let mine = this.local.get(client.id);
    if (!mine || mine.group !== shared.group) {
      mine = { group: shared.group, filters: new Set() };
      this.local.set(client.id, mine);
    }
    mine.filters.add(shared.filter);
    const member: Member = { node: this.self, clientId: client.id, group: mine.group, filters: [...mine.filters] };
    this.members.set(`${this.self}/${client.id}`, member);
    this.publishRetained(`${MEMBERS_TOPIC}/${this.self}/${client.id}`, JSON.stringify({ group: member.group, filters: member.filters }));
    return { ...sub, topic: shared.filter };
  }

  /** Whether `client` gets `packet`: a member only if it is its group's choice for the topic. */
  forward(client: Client, packet: AedesPublishPacket): AedesPublishPacket | null {
    const mine = this.local.get(client.id);
    if (!mine || ![...mine.filters].some((f) => topicMatches(f, packet.topic))) return packet;
    return this.choose(mine.group, packet.topic) === client.id ? packet : null;
  }

  /** The member of `group` that gets a message on `topic` (the highest score among live members that match it). */
  choose(group: string, topic: string): string | null {
    let best: string | null = null;
    let bestScore = -1;
    for (const m of this.members.values()) {
      if (m.group !== group || !this.liveness.alive(m.node) || !m.filters.some((f) => topicMatches(f, topic))) continue;
      const score = fnv1a(`${m.clientId}\n${topic}`);
      if (score > bestScore || (score === bestScore && best !== null && m.clientId < best)) {
        best = m.clientId;
        bestScore = score;
      }
    }
    return best;
  }

  /** A local client left: its membership goes. */
  left(clientId: string): void {
    if (!this.local.delete(clientId)) return;
    this.members.delete(`${this.self}/${clientId}`);
    this.publishRetained(`${MEMBERS_TOPIC}/${this.self}/${clientId}`, '');
  }

  /** The memberships a dead node left behind (cleared by the leader). */
  membersOf(node: string): string[] {
    return [...this.members.values()].filter((m) => m.node === node).map((m) => `${MEMBERS_TOPIC}/${m.node}/${m.clientId}`);
  }
}

/** Where each client is connected, from every node's `$SYS/<node>/new|disconnect/clients`. */
export class ClientLocations {
  private readonly at = new Map<string, string>();

  connected(node: string, clientId: string): void {
    this.at.set(clientId, node);
  }

  disconnected(node: string, clientId: string): void {
    if (this.at.get(clientId) === node) this.at.delete(clientId);
  }

  nodeOf(clientId: string): string | undefined {
    return this.at.get(clientId);
  }

  /** The clients of a node that died; they are forgotten. */
  takeClientsOf(node: string): string[] {
    const ids = [...this.at].filter(([, n]) => n === node).map(([id]) => id);
    for (const id of ids) this.at.delete(id);
    return ids;
  }
}

/**
 * A line in mosquitto's notice format (what `BrokerConnectionLog` reads), with the connection it
 * is about at the end (`[conn <node>/<n>]`): lines from different nodes reach the cloud in no
 * common order, so a line about a robot's earlier connection (its node found dead, or woken from
 * a stall) may come after the line of its next one, and must not end that one.
 */
export function connectLine(clock: Clock, clientId: string, address: string, conn: string): string {
  return `${Math.floor(clock.now() / 1000)}: New client connected from ${address} as ${clientId} (p2, c1, k0, u'${clientId}'). [conn ${conn}]`;
}

/** `conn` is `<node>/<n>`, or only `<node>` for whatever connection the client had on a node that died. */
export function disconnectLine(clock: Clock, clientId: string, conn: string): string {
  return `${Math.floor(clock.now() / 1000)}: Client ${clientId} disconnected. [conn ${conn}]`;
}

export interface ClusterNodeOptions {
  host: string;
  port: number;
  /** redis://… shared by every node of the cluster. */
  redisUrl: string;
  /** Unique in the cluster (default: aedes makes one). */
  nodeId?: string;
  /** How often a node says it is alive; a node silent for three is dead. */
  heartbeatMs: number;
  /** Logins and ACLs (robotBrokerHooks, with the cloud's account). */
  hooks: BrokerHooks;
  clock: Clock;
  scheduler: Scheduler;
  log: (msg: string, extra: object) => void;
  onOversizedPacket?: (clientId: string | null, bytes: number) => void;
}

export interface ClusterNode {
  readonly id: string;
  readonly broker: EmbeddedBroker;
  readonly shares: ClusterShares;
  close(): Promise<void>;
}

/** A message as the emitter hands it to a listener. */
type MqPacket = { topic: string; payload?: Buffer | string };

const bytes = (p: Buffer | string | undefined): Buffer => (p === undefined ? Buffer.alloc(0) : Buffer.isBuffer(p) ? p : Buffer.from(p));

interface WillPacket {
  clientId: string;
  brokerId: string;
}

interface WillPersistence {
  streamWill(brokers: Record<string, number>): Readable;
  delWill(client: { id: string; brokerId: string }): Promise<unknown>;
}

/** Starts one node of the cluster on `host:port`. */
export async function startClusterNode(opts: ClusterNodeOptions): Promise<ClusterNode> {
  const { clock } = opts;
  const mq = mqemitterRedis({ connectionString: opts.redisUrl });
  // aedes numbers a publish when it takes it (its brokerCounter) and drops, per client, any
  // message of a node numbered below the last one it delivered from that node (its dedupe of
  // overlapping subscriptions). On Redis the steps before the emit are round trips of uneven
  // length (a retained message is stored first, a QoS 1 one looks for offline sessions), so a
  // retained status taken before a report was emitted after it and reached no subscriber.
  // Numbering each message again as it is emitted, from the same counter, makes the numbers
  // follow the order messages leave for Redis, which keeps that order to every node.
  const emit = mq.emit.bind(mq);
  let numbering: { id: string; counter: number } | null = null;
  mq.emit = (packet: MqPacket & { brokerId?: string; brokerCounter?: number }, done?: (err?: Error) => void) => {
    if (numbering && packet.brokerId === numbering.id) packet.brokerCounter = ++numbering.counter;
    return emit(packet, done);
  };
  const persistenceConn = new Redis(opts.redisUrl, { lazyConnect: false });
  const persistence = redisPersistence({ conn: persistenceConn });
  const locations = new ClientLocations();
  let self = opts.nodeId ?? '';
  // Wills in a hash per node instead of the persistence's one list of every will (will-store.ts).
  installWillStore(persistence, persistenceConn, () => self);
  // A node's own id is known once aedes made it; the listeners below run only after that.
  let liveness: NodeLiveness | null = null;
  let shares: ClusterShares | null = null;
  const takenOver = new Set<string>();
  let local: Record<string, Client | undefined> = {};

  // Registered before aedes' own listeners: a takeover is noted before aedes closes the old connection.
  const onClients = (kind: 'new' | 'disconnect') => (packet: MqPacket, done: () => void) => {
    const node = packet.topic.split('/')[1]!;
    const clientId = bytes(packet.payload).toString();
    liveness?.saw(node);
    if (kind === 'new') {
      if (node !== self && local[clientId]) takenOver.add(clientId);
      locations.connected(node, clientId);
    } else locations.disconnected(node, clientId);
    done();
  };
  await new Promise<void>((resolve) => mq.on(`${SYS}+/new/clients`, onClients('new'), () => resolve()));
  await new Promise<void>((resolve) => mq.on(`${SYS}+/disconnect/clients`, onClients('disconnect'), () => resolve()));

  const hooks = opts.hooks;
  const broker = await startEmbeddedBroker({
    host: opts.host,
    port: opts.port,
    hooks: {
      ...hooks,
      authorizeSubscribe(client, sub, callback) {
        const decide = hooks.authorizeSubscribe ?? ((_c: Client, s: Subscription, cb: (err: Error | null, s: Subscription | null) => void) => cb(null, s));
        decide(client, sub, (err, allowed) => {
          if (err || !allowed || !shares) return callback(err, allowed);
          callback(null, shares.subscribe(client, allowed));
        });
      },
    },
    ...(opts.onOversizedPacket ? { onOversizedPacket: opts.onOversizedPacket } : {}),
    cluster: {
      ...(opts.nodeId ? { id: opts.nodeId } : {}),
      mq,
      persistence,
      heartbeatInterval: opts.heartbeatMs,
      authorizeForward: (client, packet) => (shares ? shares.forward(client, packet) : packet),
    },
  });
  const aedes = broker.aedes;
  numbering = aedes as unknown as { id: string; counter: number };
  self = aedes.id;
  local = (aedes as unknown as { clients: Record<string, Client | undefined> }).clients;
  const alive = new NodeLiveness(self, clock, opts.heartbeatMs);
  liveness = alive;
  const publish = (topic: string, payload: string, retain: boolean) =>
    aedes.publish({ cmd: 'publish', topic, payload: Buffer.from(payload), qos: 0, retain, dup: false }, (err) => {
      if (err) opts.log('cluster publish failed', { topic, err: err.message });
    });
  const clusterShares = new ClusterShares(self, alive, (topic, payload) => publish(topic, payload, true));

  // Memberships already in the cluster, then every change as it comes.
  mq.on(`${MEMBERS_TOPIC}/#`, (packet: MqPacket, done: () => void) => {
    clusterShares.apply(packet.topic, bytes(packet.payload));
    done();
  });
  for await (const m of retainedMessages(aedes, [`${MEMBERS_TOPIC}/#`])) clusterShares.apply(m.topic, m.payload);
  shares = clusterShares;
  // Nodes this one found dead: one heard again was only stalled, and is told again (it may have
  // missed the first word, its Redis link cut while it stalled).
  const foundDead = new Set<string>();
  mq.on(`${SYS}+/heartbeat`, (packet: MqPacket, done: () => void) => {
    const node = bytes(packet.payload).toString();
    alive.saw(node);
    if (foundDead.delete(node) && alive.leader() === self) publish(DEAD_TOPIC, node, false);
    done();
  });
  let fencedAt: number | null = null;
  mq.on(DEAD_TOPIC, (packet: MqPacket, done: () => void) => {
    done();
    if (bytes(packet.payload).toString() !== self) return;
    // The first word and its repeat come within a few heartbeats: one fence serves both.
    if (fencedAt !== null && clock.now() - fencedAt < 3 * opts.heartbeatMs) return;
    fencedAt = clock.now();
    const ids = Object.keys(local).filter((id) => local[id] && !local[id].closed);
    opts.log('the cluster found this node dead while it stalled: closing the connections it holds', { clients: ids.length });
    for (const id of ids) broker.disconnect(id);
  });
  mq.on(`${SYS}+/birth`, (packet: MqPacket, done: () => void) => {
    alive.saw(bytes(packet.payload).toString());
    done();
  });
  mq.on(CLUSTER_DISCONNECT_TOPIC, (packet: MqPacket, done: () => void) => {
    broker.disconnect(bytes(packet.payload).toString());
    done();
  });

  // Each connection is named `<node>/<start>.<n>` (a restarted node numbers afresh). Its line is
  // published when aedes registers it, before the CONNACK (after it only when the connection
  // takes over one on this node): the robot's first messages, its status, leave this node after
  // the line, in order through Redis, so no replica reads a status of a connection it has not
  // seen come up. A connection aedes never registered (a refused login) has no line.
  const incarnation = clock.now().toString(36);
  let connections = 0;
  const connOf = new WeakMap<Client, string>();
  const announce = (client: Client) => {
    if (connOf.has(client)) return;
    const conn = `${self}/${incarnation}.${++connections}`;
    connOf.set(client, conn);
    const address = (client.conn as { remoteAddress?: string; remotePort?: number } | undefined) ?? {};
    publish(BROKER_LOG_TOPIC, connectLine(clock, client.id, `${address.remoteAddress ?? 'unknown'}:${address.remotePort ?? 0}`, conn), false);
  };
  aedes.on('client', announce);
  aedes.on('connackSent', (packet: unknown, client: Client) => {
    if ((packet as { returnCode?: number }).returnCode === 0) announce(client);
  });
  aedes.on('clientDisconnect', (client: Client) => {
    clusterShares.left(client.id);
    const conn = connOf.get(client);
    if (conn === undefined) return;
    connOf.delete(client);
    // A connection another node took over is that node's to report.
    if (takenOver.delete(client.id)) return;
    if (locations.nodeOf(client.id) !== undefined && locations.nodeOf(client.id) !== self) return;
    publish(BROKER_LOG_TOPIC, disconnectLine(clock, client.id, conn), false);
  });

  // A will of a dead node's client that is connected again somewhere would say it left: dropped.
  const wills = (aedes as unknown as { persistence: WillPersistence }).persistence;
  const streamWill = wills.streamWill.bind(wills);
  wills.streamWill = (brokers) =>
    Readable.from(
      (async function* () {
        for await (const will of streamWill(brokers) as AsyncIterable<WillPacket>) {
          // aedes judges by the wall clock, so a node that stalled finds every node dead, itself
          // too: a will of a node heard within three of this node's own heartbeats, or of a
          // client still connected here, is not published (it comes again if the node dies).
          if (will.brokerId === self ? local[will.clientId] !== undefined : alive.alive(will.brokerId)) continue;
          const at = locations.nodeOf(will.clientId);
          if (at !== undefined && at !== will.brokerId && alive.alive(at)) {
            await wills.delWill({ id: will.clientId, brokerId: will.brokerId });
            continue;
          }
          yield will;
        }
      })(),
    );

  // Each heartbeat: a node silent for three is dead; the leader says its robots' connections ended and clears its memberships.
  let timer: TimerHandle | null = null;
  let closed = false;
  const sweep = () => {
    timer = null;
    if (closed) return;
    for (const node of alive.takeDead()) {
      const leader = alive.leader() === self;
      foundDead.add(node);
      if (leader) publish(DEAD_TOPIC, node, false);
      const clients = locations.takeClientsOf(node);
      opts.log('cluster node silent for three heartbeats: its connections ended', { node, clients: clients.length, reporting: leader });
      if (!leader) continue;
      for (const id of clients) if (RobotIdSchema.safeParse(id).success) publish(BROKER_LOG_TOPIC, disconnectLine(clock, id, node), false);
      for (const topic of clusterShares.membersOf(node)) publish(topic, '', true);
    }
    timer = opts.scheduler.setTimeout(sweep, opts.heartbeatMs);
  };
  timer = opts.scheduler.setTimeout(sweep, opts.heartbeatMs);

  return {
    id: self,
    broker,
    shares: clusterShares,
    async close() {
      closed = true;
      if (timer) opts.scheduler.clearTimeout(timer);
      await broker.close();
    },
  };
}
