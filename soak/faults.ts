/**
 * The seeded fault schedule: which fault, on what, when and for how long, all drawn from one
 * seeded generator before the run starts, so a seed names the same schedule every time. Faults
 * on the same part wait for each other (never both replicas down at once, never a robot killed
 * while its link is cut); faults on different parts overlap as they fall.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { seededRandom, usedBytes } from '@fleet/simulator';
import type { RobotGroup, SoakSystem } from './system.js';

export const FAULT_KINDS = [
  'agent-kill',
  'replica-kill',
  'mosquitto-restart',
  'postgres-restart',
  'store-down',
  'provider-down',
  'network-cut',
  'disk-fill',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface PlannedFault {
  kind: FaultKind;
  /** Seconds after the fault phase began. */
  atS: number;
  /** How long the part stays down or cut (s); for a kill, how long before the restart. */
  downS: number;
  /** Which group (agent-kill, network-cut, disk-fill) or replica (replica-kill), by index. */
  target: number;
  /** disk-fill: which robot of the group. */
  robot: number;
}

/** Down times per kind, [min, max] seconds. */
const DOWN_S: Record<FaultKind, [number, number]> = {
  'agent-kill': [1, 5],
  'replica-kill': [2, 8],
  'mosquitto-restart': [1, 5],
  'postgres-restart': [2, 8],
  'store-down': [5, 15],
  'provider-down': [5, 15],
  // Minutes, as a robot out of coverage is: it records offline and reports when it is back.
  'network-cut': [60, 180],
  'disk-fill': [10, 30],
};

/**
 * The schedule for a fault phase of `seconds`: every kind at least once, then about three
 * faults a minute in all, at seeded times spread over the phase (each ending before it does).
 */
export function planFaults(seed: number, seconds: number, groups: readonly Pick<RobotGroup, 'count' | 'proxy'>[]): PlannedFault[] {
  const random = seededRandom(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  const total = Math.max(FAULT_KINDS.length, Math.round((seconds / 60) * 3));
  const kinds: FaultKind[] = [...FAULT_KINDS];
  while (kinds.length < total) kinds.push(FAULT_KINDS[int(0, FAULT_KINDS.length - 1)]!);
  // Fisher-Yates with the seeded generator.
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = int(0, i);
    [kinds[i], kinds[j]] = [kinds[j]!, kinds[i]!];
  }
  const solo = groups.map((g, i) => (g.proxy ? i : -1)).filter((i) => i >= 0);
  const slot = (seconds * 0.8) / kinds.length;
  return kinds.map((kind, i) => {
    const [lo, hi] = DOWN_S[kind];
    // No fault is down for more than a tenth of the phase (a 3-minute run cuts a network for 18 s).
    const downS = Math.min(int(lo, hi), Math.max(1, Math.floor(seconds * 0.1)));
    // Agent kills fall mostly on one robot, now and then on a whole fleet process.
    const target =
      kind === 'network-cut' || (kind === 'agent-kill' && random() < 0.75 && solo.length > 0)
        ? solo[int(0, solo.length - 1)]!
        : kind === 'replica-kill'
          ? int(0, 1)
          : int(0, groups.length - 1);
    return { kind, atS: Math.round((seconds * 0.05 + slot * i + random() * slot * 0.8) * 10) / 10, downS, target, robot: int(0, (groups[target]?.count ?? 1) - 1) };
  });
}

/** One fault as it happened. */
export interface FaultRecord {
  fault: PlannedFault;
  startedAt: number;
  healedAt: number | null;
  what: string;
  error?: string;
}

/** Runs the schedule against the system; resolves once every fault is healed. */
export class FaultRunner {
  readonly records: FaultRecord[] = [];
  private readonly locks = new Map<string, Promise<void>>();
  /** Disk fills in progress: robot directory -> free the disk. */
  readonly fills = new Map<string, () => void>();

  constructor(
    private readonly sys: SoakSystem,
    private readonly log: (line: string) => void,
  ) {}

  async run(plan: readonly PlannedFault[], startedAt: number): Promise<void> {
    await Promise.all(
      plan.map(async (f) => {
        const wait = startedAt + f.atS * 1000 - Date.now();
        if (wait > 0) await sleep(wait);
        await this.exclusive(this.lockOf(f), () => this.inject(f));
      }),
    );
  }

  private lockOf(f: PlannedFault): string {
    switch (f.kind) {
      case 'agent-kill':
      case 'network-cut':
      case 'disk-fill':
        return `group:${f.target}`;
      case 'replica-kill':
        return 'replicas';
      default:
        return f.kind;
    }
  }

  private async exclusive(name: string, fn: () => Promise<void>): Promise<void> {
    const before = this.locks.get(name) ?? Promise.resolve();
    const mine = before.then(fn, fn);
    this.locks.set(name, mine.catch(() => undefined));
    await mine;
  }

  private async inject(f: PlannedFault): Promise<void> {
    const rec: FaultRecord = { fault: f, startedAt: Date.now(), healedAt: null, what: '' };
    this.records.push(rec);
    const sys = this.sys;
    const down = () => sleep(f.downS * 1000);
    try {
      switch (f.kind) {
        case 'agent-kill': {
          const g = sys.groups[f.target]!;
          rec.what = `kill -9 ${g.label} (${g.count} robot${g.count === 1 ? '' : 's'})`;
          this.log(`fault: ${rec.what}, restart in ${f.downS} s`);
          await sys.killGroup(g);
          await down();
          await this.retry(() => sys.startGroup(g, sys.opts.episodesPerMinute), `restart ${g.label}`);
          break;
        }
        case 'replica-kill': {
          // Both replicas gone (each that exits on its own is replaced, which takes a while): no
          // target, and this fault is not counted.
          const alive = sys.live.filter((c) => c.process.exit === null);
          if (alive.length === 0) throw new Error('no replica is running to kill');
          const victim = alive[f.target % alive.length]!;
          rec.what = `kill -9 replica pid ${victim.process.pid}`;
          this.log(`fault: ${rec.what}, a new one in ${f.downS} s`);
          await sys.killReplica(victim);
          await down();
          await this.retry(() => sys.addReplica(), 'start a replica');
          break;
        }
        case 'mosquitto-restart':
          rec.what = 'mosquitto stopped';
          this.log(`fault: ${rec.what} for ${f.downS} s`);
          await sys.stopBroker();
          await down();
          await this.retry(() => sys.startBroker(), 'start mosquitto');
          break;
        case 'postgres-restart':
          rec.what = 'PostgreSQL stopped';
          this.log(`fault: ${rec.what} for ${f.downS} s`);
          await sys.pg.down();
          await down();
          await this.retry(() => sys.pg.up(), 'start PostgreSQL');
          break;
        case 'store-down':
          rec.what = 'S3 store stopped';
          this.log(`fault: ${rec.what} for ${f.downS} s`);
          await sys.stopStore();
          await down();
          await this.retry(() => sys.startStore(), 'start the S3 store');
          break;
        case 'provider-down':
          rec.what = 'grant provider killed';
          this.log(`fault: ${rec.what} for ${f.downS} s`);
          await sys.stopProvider();
          await down();
          await this.retry(() => sys.startProvider(), 'start the grant provider');
          break;
        case 'network-cut': {
          const g = sys.groups[f.target]!;
          rec.what = `network of ${g.label} cut`;
          this.log(`fault: ${rec.what} for ${f.downS} s`);
          g.proxy!.cut();
          await down();
          g.proxy!.heal();
          break;
        }
        case 'disk-fill': {
          const g = sys.groups[f.target]!;
          const dir = sys.robotDir(g, f.robot);
          rec.what = `disk of ${g.label}/robot-${f.robot} filled`;
          this.log(`fault: ${rec.what} for ${f.downS} s`);
          const free = sys.fillDisk(dir, await usedBytes(dir));
          this.fills.set(dir, free);
          await down();
          free();
          this.fills.delete(dir);
          break;
        }
      }
      rec.healedAt = Date.now();
    } catch (err) {
      rec.error = err instanceof Error ? err.message : String(err);
      this.log(`fault ${f.kind} failed: ${rec.error}`);
    }
  }

  /** A part that must come back: tried again (bounded) when starting it fails. */
  private async retry(fn: () => Promise<void>, what: string): Promise<void> {
    let last: unknown;
    for (let i = 0; i < 5; i++) {
      try {
        await fn();
        return;
      } catch (err) {
        last = err;
        this.log(`${what} failed (try ${i + 1}): ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
        await sleep(2000);
      }
    }
    throw last instanceof Error ? last : new Error(String(last));
  }
}

/** Counts of injected faults (healed ones) by kind, every kind listed. */
export function faultCounts(records: readonly FaultRecord[]): Record<FaultKind, number> {
  const out = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  for (const r of records) if (!r.error) out[r.fault.kind]++;
  return out;
}
