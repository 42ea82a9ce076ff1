/**
 * The whole system of the soak as real processes on loopback: PostgreSQL, mosquitto, two
 * `fleet-cloud serve` replicas, the S3-compatible server, the reference grant provider, one HTTPS
 * webhook receiver per organization, and the robots as `fleet-sim fleet` processes (a few of
 * them one robot each behind a TCP proxy to the broker, so that one robot can be killed or cut
 * off alone). Every part can be stopped and started again on the same data.
 */
import { mkdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createTestPki, startHttpsReceiver, type TestPki, type TestReceiver } from '../cloud/src/egress/test-https.js';
import { ControlClient } from '../agent/src/control/client.js';
import type { CloudProcess } from '../test/support/cloud.js';
import type { SpawnedProcess } from '../test/support/process.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from '../test/support/grant-provider.js';
import { freePort } from '../test/support/http.js';
import { ensureMosquitto, startMosquitto, type MosquittoBroker } from '../test/support/mosquitto.js';
import { ensurePostgresBinaries, startPostgres, type PgServer } from '../test/support/postgres.js';
import { startReplicas, type ReplicaSet } from '../test/support/replicas.js';
import { createEnrollmentToken, startFleet, type FleetProcess } from '../test/support/robots.js';
import { startS3Server, type S3ServerProcess } from '../test/support/s3-server.js';
import { startTcpProxy, type TcpProxy } from '../test/support/tcp-proxy.js';
import { waitFor } from '../test/support/wait.js';
import type { ApiLog } from './watch.js';

export type OrgName = 'A' | 'B';

/** What each organization routes to its destination: episodes matching this rule. */
export const ROUTING: Readonly<Record<OrgName, { match: Record<string, string[]>; routes(e: { outcome: string; task_id: string | null }): boolean }>> = {
  A: { match: { outcome: ['success', 'failure'] }, routes: (e) => e.outcome !== 'discarded' },
  B: {
    match: { task_id: ['task_pick_place', 'task_stack_cubes'], outcome: ['success', 'failure'] },
    routes: (e) => e.outcome !== 'discarded' && (e.task_id === 'task_pick_place' || e.task_id === 'task_stack_cubes'),
  },
};

export const WEBHOOK_EVENTS = ['episode.finalized', 'episode.synced', 'episode.verified', 'episode.failed', 'episode.pruned'] as const;

export interface Organization {
  name: OrgName;
  key: string;
  destinationId: string;
  secret: string;
  webhookId: string;
  receiver: TestReceiver;
  /** Every delivery the organization's receiver got, in arrival order. */
  deliveries: Delivery[];
}

export interface Delivery {
  eventId: string;
  event: string;
  body: Record<string, unknown>;
}

/** One `fleet-sim fleet` process and its robots. */
export interface RobotGroup {
  readonly label: string;
  readonly org: OrgName;
  readonly count: number;
  /** The fleet's directory: robot i in `<dataDir>/robot-<i>`. */
  readonly dataDir: string;
  /** The proxy between the group's robots and the broker (solo robots only). */
  readonly proxy: TcpProxy | null;
  robotIds: readonly string[];
  fleet: FleetProcess | null;
  /** Every process this group ran, for their logs and memory. */
  readonly processes: FleetProcess[];
}

export interface SoakOptions {
  dir: string;
  seed: number;
  robots: number;
  solo: number;
  episodesPerMinute: number;
  bytesPerSecond: number;
  diskQuotaBytes: number;
  log: (line: string) => void;
}

const FLEET_ARGS = (o: SoakOptions) => [
  '--subtask-ms',
  '1500',
  '--bytes-per-second',
  String(o.bytesPerSecond),
  '--allow-http-uploads',
  '--sync-retry-schedule-ms',
  '1000,2000,4000',
  // An assignment whose push a fault lost is asked for again within the drain (the agent's
  // default of 5 minutes is longer than a short run's drain).
  '--sync-assignments-refresh-ms',
  '20000',
  '--disk-quota-bytes',
  String(o.diskQuotaBytes),
  '--start-concurrency',
  '4',
];

export class SoakSystem {
  pki!: TestPki;
  pg!: PgServer;
  databaseUrl!: string;
  broker!: MosquittoBroker;
  replicas!: ReplicaSet;
  /** The replicas running now (a killed one leaves, its successor joins). */
  live: CloudProcess[] = [];
  s3!: S3ServerProcess;
  provider: GrantProviderProcess | null = null;
  /** Every provider process started, for memory and logs. */
  readonly providers: GrantProviderProcess[] = [];
  providerPort = 0;
  tls!: { certFile: string; keyFile: string; ca: string };
  orgs = {} as Record<OrgName, Organization>;
  groups: RobotGroup[] = [];
  /** Processes that exited when no fault stopped them: each is a violation, with its last log lines. */
  readonly unexpectedExits: string[] = [];
  /** Processes a fault or the soak itself is stopping. */
  private readonly stopping = new Set<number>();
  private closing = false;
  private turn = 0;
  private readonly cleanups: (() => Promise<unknown>)[] = [];

  constructor(
    readonly opts: SoakOptions,
    readonly api: ApiLog,
  ) {}

  /**
   * Watches a process the soak started: an exit no fault asked for is recorded; a replica that
   * died so is replaced (as a supervisor would), so that the run goes on and the drain can settle.
   */
  private watch(label: string, proc: SpawnedProcess, onDeath?: () => Promise<void>): void {
    void proc.exited.then(async (exit) => {
      if (this.closing || this.stopping.has(proc.pid)) return;
      const tail = proc.stderrLines.filter((l) => !l.includes('"level":30')).slice(-8);
      // Its whole log, kept in the data directory (kept on failure) for whoever reads the report.
      const logFile = join(this.opts.dir, 'exits', `${label.replace(/[^\w.-]+/g, '-')}-${proc.pid}.log`);
      mkdirSync(dirname(logFile), { recursive: true });
      writeFileSync(logFile, proc.stderrLines.join('\n') + '\n');
      this.unexpectedExits.push(`${label} (pid ${proc.pid}) exited on its own (code ${exit.code}, signal ${exit.signal}); last log lines:\n${tail.map((l) => `              ${l.slice(0, 600)}`).join('\n')}`);
      this.opts.log(`UNEXPECTED: ${label} (pid ${proc.pid}) exited (code ${exit.code}, signal ${exit.signal}); its log: ${logFile}`);
      await onDeath?.().catch((err: unknown) => this.opts.log(`replacing ${label} failed: ${err instanceof Error ? err.message : String(err)}`));
    });
  }

  /** A live replica, in turn. */
  cloud(): CloudProcess {
    const alive = this.live.filter((c) => c.process.exit === null);
    if (alive.length === 0) throw new Error('no replica is running');
    return alive[this.turn++ % alive.length]!;
  }

  async start(): Promise<void> {
    const { log } = this.opts;
    mkdirSync(this.opts.dir, { recursive: true });
    const pgBin = ensurePostgresBinaries(log);
    if (!pgBin) throw new Error('PostgreSQL is not available (install postgresql, or run as root to have it installed)');
    const mosq = ensureMosquitto(log);
    if (!mosq.ok) throw new Error(`mosquitto is not available: ${mosq.reason}`);
    this.pki = createTestPki();
    this.cleanups.push(async () => this.pki.cleanup());
    this.tls = writeProviderTls(this.pki, this.opts.dir);

    log('starting PostgreSQL, mosquitto and the S3 server');
    const [pg, broker, s3] = await Promise.all([startPostgres(pgBin), startMosquitto({ dir: join(this.opts.dir, 'mosquitto') }), startS3Server()]);
    this.pg = pg;
    this.cleanups.push(() => this.pg.stop());
    this.broker = broker;
    this.cleanups.push(async () => this.broker[Symbol.asyncDispose]());
    this.s3 = s3;
    this.cleanups.push(() => this.s3.close());
    this.watch('mosquitto', broker.process);
    this.watch('s3 store', s3.process);
    this.databaseUrl = await this.createDatabase('fleet_soak');

    log('starting the cloud replicas');
    // The first replica creates the schema, the organization and its admin key; the second
    // starts while the organizations are set up.
    this.replicas = await startReplicas({
      broker: this.broker,
      count: 1,
      storeEnv: { FLEET_DATABASE_URL: this.databaseUrl },
      args: ['--egress-allow-loopback', '--egress-ca-file', this.pki.caFile, '--grant-retry-after-s', '2', '--log-level', 'info'],
    });
    this.cleanups.push(async () => this.replicas[Symbol.asyncDispose]());
    this.live = [...this.replicas.clouds];
    this.watchReplica(this.live[0]!);
    await Promise.all([this.addReplica(), this.setUpOrganizations()]);

    await this.startProvider();
    await this.startRobots();
  }

  private async createDatabase(name: string): Promise<string> {
    const pg = (await import('pg')).default;
    const c = new pg.Client({ connectionString: this.pg.url('postgres') });
    await c.connect();
    try {
      await c.query(`CREATE DATABASE ${name}`);
    } finally {
      await c.end();
    }
    return this.pg.url(name);
  }

  /** `fleet-cloud <args>` on the soak's database; its stdout. */
  private async cli(args: readonly string[]): Promise<string> {
    const r = await this.live[0]!.cli(args, { env: { FLEET_DATABASE_URL: this.databaseUrl } });
    if (r.code !== 0) throw new Error(`fleet-cloud ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
    return r.stdout.trim();
  }

  private async setUpOrganizations(): Promise<void> {
    const { log } = this.opts;
    const adminA = this.live[0]!.adminKey;
    const orgB = await this.cli(['orgs', 'create', '--name', 'soak-b', '--tier', 'enterprise']);
    const adminB = await this.cli(['keys', 'create', '--org', orgB, '--name', 'soak-b admin', '--scopes', 'admin']);
    this.providerPort = await freePort();
    const providerUrl = `https://127.0.0.1:${this.providerPort}/grant`;
    for (const [name, key] of [
      ['A', adminA],
      ['B', adminB],
    ] as const) {
      log(`organization ${name}: destination, routing rule, webhook`);
      const dest = await this.api.json<{ id: string; secret: string }>(this, 'POST', '/v1/destinations', key, { type: 'external', url: providerUrl, retention: 'until_all_verified_plus_72h' });
      await this.api.json(this, 'POST', '/v1/routing-rules', key, { destination_id: dest.id, match: ROUTING[name].match });
      const deliveries: Delivery[] = [];
      const receiver = await startHttpsReceiver(this.pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
        deliveries.push({ eventId: String(req.headers['x-service-event-id']), event: String(req.headers['x-service-event']), body: JSON.parse(req.body) as Record<string, unknown> });
        res.writeHead(200);
        res.end();
      });
      this.cleanups.push(() => receiver.close());
      const hook = await this.api.json<{ id: string }>(this, 'POST', '/v1/webhooks', key, { url: `https://127.0.0.1:${receiver.port}/hook/${name}`, events: WEBHOOK_EVENTS });
      this.orgs[name] = { name, key, destinationId: dest.id, secret: dest.secret, webhookId: hook.id, receiver, deliveries };
    }
  }

  async startProvider(): Promise<void> {
    if (this.provider) return;
    // One provider serves both destinations: each one's secret verifies its own requests.
    this.provider = await startGrantProvider({
      s3: this.s3,
      secret: this.orgs.A.secret,
      previousSecret: this.orgs.B.secret,
      tls: this.tls,
      args: ['--port', String(this.providerPort), '--retry-after-s', '2'],
    });
    this.providers.push(this.provider);
    this.watch('grant provider', this.provider.process);
  }

  async stopProvider(): Promise<void> {
    const p = this.provider;
    this.provider = null;
    if (p) this.stopping.add(p.process.pid);
    await p?.kill('SIGKILL');
    await p?.[Symbol.asyncDispose]();
  }

  private async startRobots(): Promise<void> {
    const { robots, solo, log } = this.opts;
    const soloCount = Math.min(solo, robots);
    const bulk = robots - soloCount;
    const plan: { label: string; org: OrgName; count: number; solo: boolean }[] = [];
    for (let i = 0; i < soloCount; i++) plan.push({ label: `solo-${i}`, org: i % 2 === 0 ? 'A' : 'B', count: 1, solo: true });
    const bulkA = Math.ceil(bulk / 2);
    if (bulkA > 0) plan.push({ label: 'fleet-A', org: 'A', count: bulkA, solo: false });
    if (bulk - bulkA > 0) plan.push({ label: 'fleet-B', org: 'B', count: bulk - bulkA, solo: false });
    const brokerUrl = new URL(this.broker.url);
    for (const p of plan) {
      const proxy = p.solo ? await startTcpProxy({ host: brokerUrl.hostname, port: Number(brokerUrl.port) }) : null;
      if (proxy) this.cleanups.push(() => proxy.close());
      this.groups.push({ label: p.label, org: p.org, count: p.count, dataDir: join(this.opts.dir, 'robots', p.label), proxy, robotIds: [], fleet: null, processes: [] });
    }
    log(`starting ${robots} robots: ${plan.map((p) => `${p.label} (${p.count}, org ${p.org})`).join(', ')}`);
    await Promise.all(this.groups.map((g) => this.startGroup(g, this.opts.episodesPerMinute)));
    this.cleanups.push(() => Promise.allSettled(this.groups.map(async (g) => g.fleet?.kill('SIGKILL'))));
  }

  /** Starts the group's fleet process on its data directory (enrolling its robots the first time). */
  async startGroup(g: RobotGroup, episodesPerMinute: number): Promise<void> {
    const org = this.orgs[g.org];
    const token = g.robotIds.length === 0 ? (await createEnrollmentToken(this.cloud(), { maxUses: g.count, key: org.key })).token : undefined;
    const fleet = await startFleet(this.cloud(), {
      count: g.count,
      dataDir: g.dataDir,
      autoEpisodes: episodesPerMinute,
      logLevel: 'warn',
      startTimeoutMs: 120_000,
      ...(token ? { token } : { token: 'ret_unused' }),
      args: [
        ...FLEET_ARGS(this.opts),
        '--seed',
        String(this.opts.seed * 1000 + this.groups.indexOf(g) * 100 + g.processes.length),
        '--name-prefix',
        g.label,
        ...(g.proxy ? ['--mqtt-url', `mqtt://127.0.0.1:${g.proxy.port}`] : []),
      ],
    });
    g.fleet = fleet;
    g.processes.push(fleet);
    this.watch(`fleet ${g.label}`, fleet.process);
    g.robotIds = fleet.robots;
  }

  /** kill -9 of the group's fleet process. */
  async killGroup(g: RobotGroup): Promise<void> {
    const f = g.fleet;
    g.fleet = null;
    if (f) this.stopping.add(f.process.pid);
    await f?.kill('SIGKILL');
  }

  /**
   * No new episodes from the group (SIGUSR2: its operators stop, its agents go on), and a
   * recording left in progress finished through the robot's control socket: for the drain.
   */
  async quietGroup(g: RobotGroup): Promise<void> {
    const f = g.fleet;
    if (!f) throw new Error(`${g.label} is not running`);
    f.process.child.kill('SIGUSR2');
    await f.process.waitForStdout((l) => l.includes('"operators":"stopped"'), { timeoutMs: 30_000, description: 'the {"operators":"stopped"} line' });
    for (let i = 0; i < g.count; i++) {
      const client = await ControlClient.connect(join(this.robotDir(g, i), 'agent.sock'));
      try {
        await client.episode('finish').catch(() => undefined); // not recording: nothing to finish
      } finally {
        client.close();
      }
    }
  }

  async stopBroker(): Promise<void> {
    this.stopping.add(this.broker.process.pid);
    await this.broker.stop();
  }

  async startBroker(): Promise<void> {
    await this.broker.restart();
    this.watch('mosquitto', this.broker.process);
  }

  async stopStore(): Promise<void> {
    this.stopping.add(this.s3.process.pid);
    await this.s3.stop();
  }

  async startStore(): Promise<void> {
    await this.s3.start();
    this.watch('s3 store', this.s3.process);
  }

  /** Robot i of the group's data directory. */
  robotDir(g: RobotGroup, i: number): string {
    return join(g.dataDir, `robot-${i}`);
  }

  /** A replica killed with SIGKILL; a new one started on the same store and broker. */
  async killReplica(victim: CloudProcess): Promise<void> {
    this.stopping.add(victim.process.pid);
    await victim.kill('SIGKILL');
    this.live = this.live.filter((c) => c !== victim);
  }

  private watchReplica(c: CloudProcess): void {
    this.watch(`replica ${this.replicas.clouds.indexOf(c)}`, c.process, async () => {
      this.live = this.live.filter((x) => x !== c);
      await this.addReplica();
    });
  }

  async addReplica(): Promise<void> {
    const c = await this.replicas.add();
    this.live.push(c);
    this.watchReplica(c);
    await waitFor(async () => ((await fetch(`${c.http}/readyz`)).status === 200 ? true : undefined), { timeoutMs: 60_000, description: 'the new replica ready' });
  }

  /** Fills robot `dir`'s disk (its quota) with a file; returns a function that frees it. */
  fillDisk(dir: string, usedBytes: number): () => void {
    const path = join(dir, 'soak-disk-filler');
    const size = Math.max(0, this.opts.diskQuotaBytes - usedBytes) + 1024 * 1024;
    // A sparse file: it counts toward the quota (its size) without using the machine's disk.
    writeFileSync(path, '');
    truncateSync(path, size);
    return () => rmSync(path, { force: true });
  }

  /** Every process of the system now running, by label, for the memory watch. */
  processes(): { label: string; kind: string; pid: number }[] {
    const out: { label: string; kind: string; pid: number }[] = [];
    this.replicas?.clouds.forEach((c, i) => c.process.exit === null && out.push({ label: `replica-${i}`, kind: 'replica', pid: c.process.pid }));
    if (this.broker?.process.exit === null) out.push({ label: 'mosquitto', kind: 'mosquitto', pid: this.broker.process.pid });
    if (this.s3?.process.exit === null) out.push({ label: 's3', kind: 's3', pid: this.s3.process.pid });
    if (this.provider?.process.exit === null) out.push({ label: 'grant-provider', kind: 'grant-provider', pid: this.provider.process.pid });
    for (const g of this.groups) if (g.fleet && g.fleet.process.exit === null) out.push({ label: g.label, kind: g.count === 1 ? 'fleet-solo' : 'fleet', pid: g.fleet.process.pid });
    const pgPid = postmasterPid(this.pg);
    if (pgPid !== null) out.push({ label: 'postgres', kind: 'postgres', pid: pgPid });
    return out;
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const c of this.cleanups.splice(0).reverse()) await c().catch(() => undefined);
  }
}

/** The PostgreSQL server's pid (its `postmaster.pid`), or null while it is down. */
function postmasterPid(pg: PgServer | undefined): number | null {
  if (!pg) return null;
  try {
    const pid = Number(readFileSync(join(pg.dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}
