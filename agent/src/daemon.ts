import { mkdir } from 'node:fs/promises';
import { EventEmitter } from 'node:events';
import { CAPABILITY_EPISODES_V1, iso, Lifecycle, type Clock, type CommandReply } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { RobotActions } from './actions.js';
import { CommandHandler } from './commands.js';
import { NotEnrolledError, NotFoundError, RefusalError } from './errors.js';
import { runtimeVersionOf, type AgentConfig } from './config.js';
import { recorderTakesEpisodeVerbs, type RecorderKind } from './recording/recorder-config.js';
import type { OperatorContext, OperatorContextPatch } from './rules/operator-context.js';
import { controlSocketPath } from './control/client.js';
import type { ControlRequest } from './control/protocol.js';
import { ControlServer } from './control/server.js';
import { dropPreviousPassword, readCredentials, storeRotatedPassword, type Credentials } from './credentials.js';
import { listEpisodeViews, showEpisodeView, type EpisodeViewSource } from './episodes-view.js';
import { AgentMetrics } from './metrics.js';
import { MqttLink } from './link/mqtt-link.js';
import { OutboxSender, type OutboxStatus } from './outbox.js';
import type { Recorder } from './recording/recorder.js';
import { RecordingStateMachine, type EndVerb, type EpisodeTransitionResult, type RecordingState } from './recording/state-machine.js';
import { openAgentStore } from './store/sqlite.js';
import type { FreeBytes } from './sync/pressure.js';
import { RateLimiter } from './sync/rate-limit.js';
import { uploadDispatcher } from './sync/trust.js';
import { Retention } from './sync/retention.js';
import { Uploader } from './sync/uploader.js';
import type { Dispatcher } from 'undici';
import type { AgentStore } from './store/types.js';
import type { Scheduler, TimerHandle } from './time.js';

/** What the caller hands the agent: time, logging, and the robot-specific parts. */
export interface AgentDeps {
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
  recorder: Recorder;
  actions: RobotActions;
  /**
   * Which kind of recorder `recorder` is (default `synthetic`: one the agent drives). With
   * `import` the robot's own stack starts and ends recordings and with `none` nothing records:
   * neither announces `episodes.v1`, and only `fail` works.
   */
  recorderKind?: RecorderKind;
  /** With `import`: the folder's watcher, made once the state machine runs, stopped before it. */
  importWatcher?: (deps: { machine: RecordingStateMachine; store: AgentStore; dataDir: string; clock: Clock; scheduler: Scheduler; logger: Logger }) => { start(): Promise<void> | void; stop(): Promise<void> };
  /** Default: read from `<dataDir>/credentials.json`. */
  credentials?: Credentials;
  /** Default: `<dataDir>/agent.sqlite`. */
  store?: AgentStore;
  /** Connect to the broker (default true); off for tests of everything else. */
  link?: boolean;
  /** Serve the local control socket (default true). */
  controlSocket?: boolean;
  /** Jitter source of the reconnect backoff and of sync retries. */
  random?: () => number;
  /** HTTP agent for uploads (default: one built from the config's trust settings). */
  uploadDispatcher?: Dispatcher;
  /**
   * Free bytes of the data directory's file system as the disk pressure reports them (default
   * `statfs`). A seam like the clock: a test of a nearly full disk injects a small number.
   */
  freeBytes?: FreeBytes;
}

export interface AgentStatus {
  robot_id: string;
  name: string;
  recording_state: RecordingState;
  episode_id: string | null;
  recording_session_id: string | null;
  episode_seq: number | null;
  started_at: string | null;
  connected: boolean;
  runtime_version: string;
  platform: string;
  capabilities: string[];
  /** The durable outbox: messages awaiting the cloud's acknowledgment, and ones it refused. */
  outbox: OutboxStatus;
  /** Cloud sync: replicas still to do (failing among them), verified, settled otherwise, uploading now; null when off. */
  sync: { open: number; failing: number; verified: number; settled: number; uploading: number } | null;
}

const PRUNE_EVERY_MS = 60 * 60 * 1000;
/** Acknowledged outbox messages are kept this long (to look at), then deleted; refused ones stay. */
const OUTBOX_ACKED_KEPT_MS = 24 * 60 * 60 * 1000;

/**
 * One robot's agent: store, recording state machine, recorder, robot actions, MQTT link and
 * local control surface. Several can run in one process (the simulator) as long as each has
 * its own data directory.
 */
export class Agent extends EventEmitter<{ connected: []; disconnected: []; state: [RecordingState] }> {
  private store: AgentStore | undefined;
  private sm: RecordingStateMachine | undefined;
  private handler: CommandHandler | undefined;
  private mqtt: MqttLink | undefined;
  private sender: OutboxSender | undefined;
  private syncer: Uploader | undefined;
  private retention: Retention | undefined;
  private readonly life: Lifecycle;
  private control: ControlServer | undefined;
  private metrics: AgentMetrics | undefined;
  private creds: Credentials | undefined;
  /** Writes of credentials.json, one after the other (a rotation and the dropping of the previous password). */
  private credsWrites: Promise<unknown> = Promise.resolve();
  private pruneTimer: TimerHandle | undefined;
  private readonly inFlight = new Set<Promise<unknown>>();
  private accepting = false;
  private stopped = false;
  private readonly log: Logger;

  constructor(
    readonly config: AgentConfig,
    private readonly deps: AgentDeps,
  ) {
    super();
    this.log = deps.logger;
    this.life = new Lifecycle((part, err) => this.log.warn({ err, part }, 'closing failed'));
  }

  get robotId(): string {
    return this.credentials.robot_id;
  }

  get credentials(): Credentials {
    if (!this.creds) throw new Error('agent not started');
    return this.creds;
  }

  get machine(): RecordingStateMachine {
    if (!this.sm) throw new Error('agent not started');
    return this.sm;
  }

  get commands(): CommandHandler {
    if (!this.handler) throw new Error('agent not started');
    return this.handler;
  }

  get link(): MqttLink | undefined {
    return this.mqtt;
  }

  get outbox(): OutboxSender {
    if (!this.sender) throw new Error('agent not started');
    return this.sender;
  }

  /** The uploader; undefined when sync is off. */
  get uploader(): Uploader | undefined {
    return this.syncer;
  }

  /** The platform announced: configured, else the one given at enrollment. */
  get platform(): string {
    return this.config.platform ?? this.creds?.platform ?? 'unknown';
  }

  get capabilities(): string[] {
    return this.config.legacyRuntime || !this.drivesRecorder ? [] : [CAPABILITY_EPISODES_V1];
  }

  /** Whether episodes start and end by the verbs (the agent drives its recorder), or by the robot's own stack. */
  private get drivesRecorder(): boolean {
    return recorderTakesEpisodeVerbs(this.deps.recorderKind ?? 'synthetic');
  }

  /**
   * Opens the store, finalizes a recording a crash left behind (the robot is idle afterwards),
   * then serves the control socket and connects to the broker (without waiting for it). The
   * parts start in order and close in reverse (`stop`); a failed start closes what had started.
   */
  async start(): Promise<void> {
    try {
      await this.open();
    } catch (err) {
      // Leave nothing half-open: the socket (the directory's lock) and the store.
      this.stopped = true;
      await this.life.close();
      throw err;
    }
  }

  private async open(): Promise<void> {
    const { config, deps } = this;
    const creds = deps.credentials ?? (await readCredentials(config.dataDir));
    if (!creds) throw new NotEnrolledError(`not enrolled: no credentials in ${config.dataDir}; run \`fleet-agent enroll --api URL --token TOKEN --data-dir ${config.dataDir}\` first`);
    this.creds = creds;
    await mkdir(config.dataDir, { recursive: true, mode: 0o700 });
    if (deps.controlSocket ?? true) this.control = await this.openControlSocket();
    const store = await this.openStore();
    this.store = store;
    this.metrics = new AgentMetrics({ store, dataDir: config.dataDir, clock: deps.clock, connected: () => this.mqtt?.connected ?? false, uploader: () => this.syncer, outboxSends: () => this.sender?.sendCounts });
    // The link is made here and connects last; it closes after everything that publishes through it.
    const link = deps.link ?? true ? await this.openLink(creds) : undefined;
    const sender = await this.openOutbox(store, link);
    this.sender = sender;
    // Retention of local copies: prunes what fell due while the agent was off, then keeps a timer.
    const retention = config.sync ? await this.openRetention(store, sender) : undefined;
    this.retention = retention;
    const uploader = config.sync ? await this.openUploader(store, link, sender, retention) : undefined;
    this.syncer = uploader;
    const machine = await this.openRecording(store, creds, link, sender, uploader);
    this.handler = this.buildCommandHandler(store, creds, link, machine);
    if (deps.importWatcher) await this.openImportWatcher(deps.importWatcher, store, machine);
    await this.prune();
    this.accepting = true;
    if (link) {
      this.wireLink(link, creds, sender, uploader);
      this.mqtt = link;
      link.start();
    }
    this.log.info({ robot_id: creds.robot_id, legacy_runtime: config.legacyRuntime, state: machine.state }, 'agent started');
  }

  /** The control socket, listening: the data directory's lock. */
  private openControlSocket(): Promise<ControlServer> {
    const { config, life } = this;
    const log = this.log;
    // Listening first doubles as the data directory's lock: a second agent stops here, before
    // it could mistake the first one's recording for a crashed one. It closes last.
    return life.add('control socket', async () => {
      const c = new ControlServer({ socketPath: config.socketPath ?? controlSocketPath(config.dataDir), handler: (r) => this.track(this.onControl(r)), logger: log });
      await c.listen();
      return { value: c, close: () => c.close() };
    });
  }

  /** The local store (episodes, outbox, sync state). */
  private openStore(): Promise<AgentStore> {
    const { config, deps, life } = this;
    return life.add('store', async () => {
      const s = deps.store ?? openAgentStore(config.dataDir, deps.clock);
      return { value: s, close: () => s.close() };
    });
  }

  /** The MQTT link to the broker, made but not started (`open` starts it last). */
  private openLink(creds: Credentials): Promise<MqttLink> {
    const { config, deps, life } = this;
    const log = this.log;
    return life.add('mqtt link', async () => {
      const l = new MqttLink({
        credentials: creds,
        ...(config.mqttUrl ? { urls: config.mqttUrl } : {}),
        clock: deps.clock,
        scheduler: deps.scheduler,
        logger: log,
        reconnectMinMs: config.reconnectMinMs,
        reconnectMaxMs: config.reconnectMaxMs,
        keepaliveSeconds: config.keepaliveSeconds,
        ...(deps.random ? { random: deps.random } : {}),
        status: () => ({
          runtime_version: runtimeVersionOf(config),
          platform: this.platform,
          capabilities: this.capabilities,
          recording_state: this.machine.state,
        }),
        onCommand: (payload) => {
          if (!this.accepting) return;
          void this.track(this.commands.handlePayload(payload));
        },
        onOutboxAck: (payload) => this.outbox.handleAck(payload),
        // Subscribed only when this agent syncs.
        ...(config.sync ? { onSync: (payload: Buffer) => this.syncer?.handleMessage(payload) } : {}),
      });
      return { value: l, close: () => l.stop() };
    });
  }

  /** The outbox sender, publishing through the link. */
  private openOutbox(store: AgentStore, link: MqttLink | undefined): Promise<OutboxSender> {
    const { config, deps, life } = this;
    const log = this.log;
    return life.add('outbox', async () => {
      const o = new OutboxSender({
        store: store.outbox,
        transport: {
          get connected() {
            return link?.connected ?? false;
          },
          publishOutbox: (payload) => (link ? link.publishOutbox(payload) : Promise.reject(new Error('no MQTT link'))),
        },
        clock: deps.clock,
        scheduler: deps.scheduler,
        logger: log,
        maxInFlight: config.outboxMaxInFlight,
        ackTimeoutMs: config.outboxAckTimeoutMs,
      });
      await o.start();
      // Pending outbox messages stay in the store for the next start.
      return { value: o, close: () => o.stop() };
    });
  }

  /** Retention of local copies (only when this agent syncs). */
  private openRetention(store: AgentStore, sender: OutboxSender): Promise<Retention> {
    const { config, deps, life } = this;
    const log = this.log;
    return life.add('retention', async () => {
      const r = new Retention({ store, dataDir: config.dataDir, clock: deps.clock, scheduler: deps.scheduler, logger: log.child({ component: 'retention' }), onReport: () => sender.notify() });
      await r.start();
      return { value: r, close: () => r.stop() };
    });
  }

  /** The uploader of replicas and its HTTP dispatcher (only when this agent syncs). */
  private openUploader(store: AgentStore, link: MqttLink | undefined, sender: OutboxSender, retention: Retention | undefined): Promise<Uploader> {
    const { config, deps, life } = this;
    const log = this.log;
    return life.add('uploader', async () => {
      let dispatcher = deps.uploadDispatcher;
      let own: { close(): Promise<void> } | undefined;
      if (!dispatcher) {
        const d = uploadDispatcher({ caFile: config.uploadCaFile, extraCaCertsFile: config.extraCaCertsFile, connections: config.syncConcurrency * config.syncPartParallel });
        own = d;
        dispatcher = d;
      }
      const u = new Uploader({
        store,
        dataDir: config.dataDir,
        transport: {
          get connected() {
            return link?.connected ?? false;
          },
          publishSyncRequest: (payload) => (link ? link.publishSyncRequest(payload) : Promise.reject(new Error('no MQTT link'))),
        },
        http: {
          dispatcher,
          allowHttp: config.allowHttpUploads,
          timeoutMs: config.uploadTimeoutMs,
          // One bucket for every PUT and part of this agent: the limit holds for their sum.
          ...(config.uploadLimit !== undefined ? { limiter: new RateLimiter({ bytesPerSecond: config.uploadLimit, clock: this.deps.clock, scheduler: this.deps.scheduler }) } : {}),
        },
        clock: deps.clock,
        scheduler: deps.scheduler,
        logger: log.child({ component: 'uploader' }),
        random: deps.random ?? Math.random,
        onReport: () => sender.notify(),
        onVerified: () => retention?.kick(),
        concurrency: config.syncConcurrency,
        partParallel: config.syncPartParallel,
        grantTimeoutMs: config.syncGrantTimeoutMs,
        assignmentsRefreshMs: config.syncAssignmentsRefreshMs,
        retryScheduleMs: config.syncRetryScheduleMs,
        jitter: config.syncJitter,
        ...(deps.freeBytes ? { freeBytes: deps.freeBytes } : {}),
      });
      await u.start();
      return {
        value: u,
        close: async () => {
          // Running uploads stop; their progress (upload ids, parts, receipts) is in the store.
          await u.stop();
          await own?.close().catch(() => undefined);
        },
      };
    });
  }

  /** The recording state machine, a recording a crash left behind recovered. */
  private openRecording(store: AgentStore, creds: Credentials, link: MqttLink | undefined, sender: OutboxSender, uploader: Uploader | undefined): Promise<RecordingStateMachine> {
    const { config, deps, life } = this;
    const log = this.log;
    return life.add('recording', async () => {
      const m = new RecordingStateMachine({
        store,
        recorder: deps.recorder,
        robotId: creds.robot_id,
        dataDir: config.dataDir,
        clock: deps.clock,
        scheduler: deps.scheduler,
        logger: log,
        finalizingDelayMs: config.finalizingDelayMs,
        finalizeRetryMs: config.finalizeRetryMs,
      });
      m.on('state', (change) => {
        // A finalized episode's report was enqueued in the same transaction.
        if (change.event === 'finalized') {
          sender.notify();
          // The cloud assigns it once indexed (a push); a local assignment may already wait for it.
          uploader?.kick();
        }
        this.emit('state', change.to);
        link?.publishStatus().catch((err: unknown) => log.warn({ err }, 'could not publish status'));
      });
      this.sm = m;
      // A recording recovered here enqueues its report like any other finalization.
      await m.init();
      // Closing lets a running finalization end and closes a running recording's files.
      return { value: m, close: () => m.close() };
    });
  }

  /** The command handler: cloud commands, run against the machine and the actions. */
  private buildCommandHandler(store: AgentStore, creds: Credentials, link: MqttLink | undefined, machine: RecordingStateMachine): CommandHandler {
    const { config, deps } = this;
    const log = this.log;
    return new CommandHandler({
      robotId: creds.robot_id,
      machine,
      actions: deps.actions,
      store,
      clock: deps.clock,
      logger: log,
      // Without episodes.v1 (a legacy runtime, an import folder, no recorder) only `fail` runs.
      legacyRuntime: config.legacyRuntime || !this.drivesRecorder,
      windowMs: config.commandResultWindowMs,
      publish: (reply: CommandReply) => link?.publishReply(reply) ?? Promise.resolve(),
      rotateCredentials: async ({ password }) => {
        // Durable first: the cloud refuses the old password as soon as it reads the answer. The
        // password the broker accepts now is kept until the new one has worked once.
        const stored = await this.updateCredentials((c) => storeRotatedPassword(config.dataDir, c, password, link?.acceptedPassword));
        link?.setPassword(stored.mqtt.password, stored.mqtt.previous_password);
        log.info({ robot_id: creds.robot_id, previous_password_kept: stored.mqtt.previous_password !== undefined }, 'broker credentials rotated and stored');
      },
    });
  }

  /** The import watcher (a folder of recordings made elsewhere). */
  private async openImportWatcher(make: NonNullable<AgentDeps['importWatcher']>, store: AgentStore, machine: RecordingStateMachine): Promise<void> {
    const { config, deps, life } = this;
    const log = this.log;
    await life.add('import watcher', async () => {
      const w = make({ machine, store, dataDir: config.dataDir, clock: deps.clock, scheduler: deps.scheduler, logger: log.child({ component: 'import' }) });
      await w.start();
      return { value: w, close: () => w.stop() };
    });
  }

  /** What the outbox, the uploader and the credentials do when the link connects, drops or has the rotated password accepted. */
  private wireLink(link: MqttLink, creds: Credentials, sender: OutboxSender, uploader: Uploader | undefined): void {
    const { config } = this;
    const log = this.log;
    link.on('connected', () => {
      sender.connected();
      if (link.syncAvailable) uploader?.connected();
      else uploader?.disconnected();
      this.emit('connected');
    });
    link.on('passwordAccepted', (password) => {
      // The broker has the current password: the previous one is of no more use.
      void this.track(
        this.updateCredentials((c) => dropPreviousPassword(config.dataDir, c, password)).then(
          () => log.info({ robot_id: creds.robot_id }, 'connected with the rotated password; the previous one is forgotten'),
          (err: unknown) => log.warn({ err: { message: (err as Error).message } }, 'could not forget the previous broker password'),
        ),
      );
    });
    link.on('disconnected', () => {
      sender.disconnected();
      uploader?.disconnected();
      this.emit('disconnected');
    });
  }

  /** Resolves once connected to the broker. */
  whenConnected(): Promise<void> {
    if (!this.mqtt) return Promise.reject(new Error('agent has no MQTT link'));
    return this.mqtt.whenConnected();
  }

  /**
   * Stops cleanly: stops accepting commands and control requests, lets running ones and a running
   * finalization end, closes a running recording's files (it is finalized as interrupted at the
   * next start), publishes the retained offline status and closes the store.
   */
  async stop(): Promise<void> {
    this.accepting = false;
    this.stopped = true;
    if (this.pruneTimer !== undefined) this.deps.scheduler.clearTimeout(this.pruneTimer);
    this.pruneTimer = undefined;
    // The front door closes first, and what came through it finishes; then the parts close in
    // reverse start order: recording, uploader, retention, outbox, MQTT link (retained offline status), store.
    await this.control?.close();
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
    await this.life.close();
    this.log.info('agent stopped');
  }

  /** Resolves when no retention check is running: what a timer set going has pruned by then (tests). */
  async retentionIdle(): Promise<void> {
    await this.retention?.idle();
  }

  status(): AgentStatus {
    const s = this.machine.status();
    return {
      robot_id: this.robotId,
      name: this.credentials.name,
      recording_state: s.state,
      episode_id: s.episode_id,
      recording_session_id: s.recording_session_id,
      episode_seq: s.episode_seq,
      started_at: s.started_at === null ? null : iso(s.started_at),
      connected: this.mqtt?.connected ?? false,
      runtime_version: runtimeVersionOf(this.config),
      platform: this.platform,
      capabilities: this.capabilities,
      outbox: this.sender?.status ?? { pending: 0, refused: 0 },
      sync: this.syncer?.status ?? null,
    };
  }

  /**
   * An episode verb from the robot itself (headset, buttons, the simulator's operator): the same
   * transition as the cloud's command, available on every runtime.
   */
  episode(verb: 'start' | EndVerb, source = 'local'): Promise<EpisodeTransitionResult> {
    if (verb !== 'fail' && this.deps.recorderKind === 'import') {
      return Promise.reject(new RefusalError('unsupported', `cannot ${verb}: with recorder kind import the robot's own stack starts and ends recordings (only fail works)`));
    }
    return this.machine.apply(verb, { source });
  }

  setContext(patch: OperatorContextPatch): Promise<OperatorContext> {
    return this.machine.setContext(patch);
  }

  getContext(): Promise<OperatorContext> {
    return this.machine.getContext();
  }

  private async onControl(req: ControlRequest): Promise<Record<string, unknown>> {
    if (!this.accepting) throw new RefusalError('failed', this.stopped ? 'the agent is stopping' : 'the agent is starting');
    switch (req.op) {
      case 'episode.start':
      case 'episode.finish':
      case 'episode.fail':
      case 'episode.discard': {
        const verb = req.op.slice('episode.'.length) as 'start' | EndVerb;
        return { robot_id: this.robotId, ...(await this.episode(verb, 'control')) };
      }
      case 'context.set':
        return { context: await this.setContext(req.context) };
      case 'context.get':
        return { context: await this.getContext() };
      case 'status':
        return { ...this.status(), uploads: (await this.syncer?.uploads()) ?? [] };
      case 'episodes.list':
        return { episodes: await listEpisodeViews(this.episodeViewSource(), req.limit ?? 50) };
      case 'episodes.show': {
        const episode = await showEpisodeView(this.episodeViewSource(), req.episode_id);
        if (!episode) throw new NotFoundError(`no episode ${req.episode_id} on this robot`);
        return { episode };
      }
      case 'metrics':
        return { content_type: this.metrics!.registry.contentType, text: await this.metrics!.text() };
    }
  }

  private episodeViewSource(): EpisodeViewSource {
    const syncer = this.syncer;
    if (!this.store) throw new RefusalError('failed', 'the agent is starting');
    return { store: this.store, dataDir: this.config.dataDir, ...(syncer ? { uploads: () => syncer.uploads(1000) } : {}) };
  }

  /** Runs `update` on the stored credentials after any write under way, and keeps what it returns. */
  private updateCredentials(update: (current: Credentials) => Promise<Credentials>): Promise<Credentials> {
    const run = this.credsWrites.then(async () => {
      this.creds = await update(this.credentials);
      return this.creds;
    });
    this.credsWrites = run.catch(() => undefined);
    return run;
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.inFlight.add(p);
    const done = () => this.inFlight.delete(p);
    p.then(done, done);
    return p;
  }

  private async prune(): Promise<void> {
    if (this.stopped) return;
    try {
      const n = await this.commands.prune();
      if (n > 0) this.log.debug({ pruned: n }, 'forgot old command results');
      const acked = (await this.store?.outbox.prune(this.deps.clock.now() - OUTBOX_ACKED_KEPT_MS)) ?? 0;
      if (acked > 0) this.log.debug({ pruned: acked }, 'forgot old acknowledged outbox messages');
    } catch (err) {
      this.log.warn({ err }, 'could not prune command results');
    }
    if (!this.stopped) this.pruneTimer = this.deps.scheduler.setTimeout(() => void this.prune(), PRUNE_EVERY_MS);
  }
}
