import type { Episode } from '@fleet/protocol';

/**
 * What the demo's live log shows of an episode: its outcome once reported, then the state of its
 * replica (one destination in the demo) as it goes granted → syncing → synced → verified.
 */
export type EpisodeStage = 'reported' | 'granted' | 'syncing' | 'synced' | 'verified';

const STAGES: readonly EpisodeStage[] = ['reported', 'granted', 'syncing', 'synced', 'verified'];
const RANK: Readonly<Record<EpisodeStage, number>> = { reported: 0, granted: 1, syncing: 2, synced: 3, verified: 4 };

/**
 * `from → … → to` with every stage in between: a replica moves through each in order (the robot
 * reports each), and an upload of a few hundred KiB often passes several between two polls.
 */
export function stagePath(from: EpisodeStage, to: EpisodeStage): string {
  return STAGES.slice(RANK[from], RANK[to] + 1).join(' → ');
}

export function stageOf(ep: Episode): EpisodeStage {
  const replica = ep.replicas[0];
  return replica ? replica.state : 'reported';
}

export function formatBytes(n: number | null): string {
  if (n === null) return '?';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/**
 * Tracks the stage of every episode seen and turns each poll of `GET /v1/episodes` into the
 * lines to print: one per episode that appeared or moved on, naming every stage it passed since
 * the last poll (`granted → syncing → synced → verified`), oldest first. A replica error (an
 * upload being retried) is printed once per distinct message.
 */
export class EpisodeWatcher {
  private readonly stages = new Map<string, EpisodeStage>();
  private readonly errors = new Map<string, string>();
  /** Episodes seen verified, in total. */
  verified = 0;

  /** Episodes seen that may still move on: neither verified nor discarded (nothing to upload). */
  unsettled(): string[] {
    return [...this.stages].filter(([id, stage]) => stage !== 'verified' && !this.discarded.has(id)).map(([id]) => id);
  }

  private readonly discarded = new Set<string>();

  constructor(private readonly robotName: (robotId: string) => string) {}

  update(episodes: readonly Episode[]): string[] {
    const lines: string[] = [];
    const oldestFirst = [...episodes].sort((a, b) => a.reported_at.localeCompare(b.reported_at) || a.id.localeCompare(b.id));
    for (const ep of oldestFirst) {
      const who = `${ep.id}  ${this.robotName(ep.robot_id)}`;
      const stage = stageOf(ep);
      const before = this.stages.get(ep.id);
      if (before === undefined) {
        const what = `${ep.outcome}, ${ep.duration_s === null ? '?' : ep.duration_s.toFixed(1)} s, ${formatBytes(ep.bag_size_bytes)}`;
        const note = ep.outcome === 'discarded' ? ' (discarded: nothing to upload)' : '';
        lines.push(`${who}  reported (${what})${note}`);
        if (stage !== 'reported') lines.push(`${who}  ${stagePath('reported', stage)}${this.suffix(ep, stage)}`);
      } else if (RANK[stage] > RANK[before]) {
        lines.push(`${who}  ${stagePath(before, stage)}${this.suffix(ep, stage)}`);
      }
      if (stage === 'verified' && before !== 'verified') this.verified += 1;
      this.stages.set(ep.id, stage);
      if (ep.outcome === 'discarded') this.discarded.add(ep.id);
      const error = ep.replicas[0]?.error ?? null;
      if (error !== null && this.errors.get(ep.id) !== error) lines.push(`${who}  upload problem, the robot retries: ${error}`);
      if (error === null) this.errors.delete(ep.id);
      else this.errors.set(ep.id, error);
    }
    return lines;
  }

  private suffix(ep: Episode, stage: EpisodeStage): string {
    const key = ep.replicas[0]?.object_key;
    return stage === 'verified' && key !== undefined ? `  (bucket key ${key})` : '';
  }
}
