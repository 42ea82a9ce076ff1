import { Counter, Gauge, Registry } from 'prom-client';
import type { Clock, Pressure } from '@fleet/protocol';
import type { AgentStore } from './store/types.js';
import { measurePressure } from './sync/pressure.js';
import type { Uploader } from './sync/uploader.js';
import type { OutboxSendCounts } from './outbox.js';

/** What the agent's metrics read, each time they are asked for. */
export interface AgentMetricsSource {
  store: AgentStore;
  dataDir: string;
  clock: Clock;
  connected(): boolean;
  /** Undefined when sync is off. */
  uploader(): Pick<Uploader, 'totals' | 'activeCount'> | undefined;
  /** The outbox sender's totals since start; undefined before it runs. */
  outboxSends?: () => OutboxSendCounts | undefined;
  /** Default: measured from the data directory's file system and the store. */
  pressure?: () => Promise<Pressure>;
}

/**
 * The agent's outbox and upload figures in Prometheus text, answered on the local control socket
 * (`fleet-agent metrics`). Everything is read when asked: counts from the store, totals from the
 * uploader's memory (since the agent started), disk pressure as a grant request reports it. One
 * registry per agent, so the simulator's agents in one process each answer their own; Node's
 * process metrics are left out for the same reason (they would describe the shared process).
 */
export class AgentMetrics {
  readonly registry = new Registry();
  /** Measured once per scrape, before the registry collects (its gauges collect concurrently). */
  private pressure: Pressure | null = null;

  constructor(private readonly src: AgentMetricsSource) {
    const registers = [this.registry];
    const pressure = () => this.pressure;
    new Gauge({
      name: 'fleet_agent_connected',
      help: '1 while the MQTT link to the cloud is up',
      registers,
      collect() {
        this.set(src.connected() ? 1 : 0);
      },
    });
    new Gauge({
      name: 'fleet_agent_outbox_messages',
      help: 'Durable outbox messages by kind and state (pending, acked until pruned after 24 h, refused)',
      labelNames: ['kind', 'state'],
      registers,
      async collect() {
        this.reset();
        for (const r of await src.store.outbox.countsByKind()) this.set({ kind: r.kind, state: r.state }, r.count);
      },
    });
    // The sender keeps the running totals; a publish carries several messages once the cloud takes batches.
    new Counter({
      name: 'fleet_agent_outbox_sent_total',
      help: 'Outbox messages published since the agent started (resends included)',
      registers,
      collect() {
        this.reset();
        this.inc(src.outboxSends?.()?.messages ?? 0);
      },
    });
    new Counter({
      name: 'fleet_agent_outbox_publishes_total',
      help: 'MQTT publishes that carried them (fewer than the messages once the cloud takes batches)',
      registers,
      collect() {
        this.reset();
        this.inc(src.outboxSends?.()?.publishes ?? 0);
      },
    });
    // The uploader keeps the running totals; these counters show them as they are at the scrape.
    new Counter({
      name: 'fleet_agent_upload_bytes_sent_total',
      help: 'Bytes handed to upload connections since the agent started (resent parts included)',
      registers,
      collect() {
        this.reset();
        this.inc(src.uploader()?.totals.bytesSent ?? 0);
      },
    });
    new Counter({
      name: 'fleet_agent_upload_attempts_total',
      help: 'Replica upload attempts since the agent started, by result',
      labelNames: ['result'],
      registers,
      collect() {
        this.reset();
        for (const [result, n] of Object.entries(src.uploader()?.totals.attempts ?? {})) this.inc({ result }, n);
      },
    });
    new Gauge({
      name: 'fleet_agent_uploads_active',
      help: 'Replicas uploading (or asking for a grant) now',
      registers,
      collect() {
        this.set(src.uploader()?.activeCount ?? 0);
      },
    });
    new Gauge({
      name: 'fleet_agent_replicas',
      help: 'Replicas assigned to this robot by local state',
      labelNames: ['state'],
      registers,
      async collect() {
        for (const [state, n] of Object.entries(await src.store.sync.countsByState())) this.set({ state }, n);
      },
    });
    new Gauge({
      name: 'fleet_agent_disk_free_bytes',
      help: "Free bytes on the data directory's file system",
      registers,
      collect() {
        const p = pressure();
        if (p) this.set(p.free_bytes);
      },
    });
    new Gauge({
      name: 'fleet_agent_sync_backlog_bytes',
      help: 'Bytes of finalized episodes with no verified replica (never pruned)',
      registers,
      collect() {
        const p = pressure();
        if (p) this.set(p.backlog_bytes);
      },
    });
    new Gauge({
      name: 'fleet_agent_disk_hours_to_full',
      help: 'Hours until the disk is full at the recording rate of the last six hours (+Inf when nothing was recorded)',
      registers,
      collect() {
        const p = pressure();
        if (p) this.set(p.hours_to_full ?? Infinity);
      },
    });
  }

  /** The Prometheus text exposition. */
  async text(): Promise<string> {
    const { src } = this;
    try {
      this.pressure = src.pressure ? await src.pressure() : await measurePressure(src.dataDir, src.store.sync, src.clock.now());
    } catch {
      // A file system that cannot be measured leaves the disk gauges at their last value.
    }
    return this.registry.metrics();
  }
}
