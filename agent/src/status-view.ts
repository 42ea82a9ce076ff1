import stringWidth from 'string-width';
import type { AgentStatus } from './daemon.js';
import type { UploadProgressView } from './sync/progress.js';

/**
 * `fleet-agent status` for people: the agent's state in a few lines, then each pending
 * episode's sync progress per destination. On a terminal each replica gets a progress bar; in a
 * pipe or a log it is one plain `key=value` line per replica (grep-able, stable).
 */

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'] as const;

/** 1536 → "1.5 KiB". */
export function formatBytes(n: number): string {
  let v = n;
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u += 1;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${UNITS[u]}`;
}

export function formatRate(bps: number): string {
  return `${formatBytes(Math.round(bps))}/s`;
}

/** `[#####-----]`, `width` cells inside the brackets. */
export function progressBar(done: number, total: number, width = 24): string {
  const f = total <= 0 ? 1 : Math.min(1, Math.max(0, done / total));
  const full = Math.floor(f * width);
  return `[${'#'.repeat(full)}${'-'.repeat(width - full)}]`;
}

function percent(done: number, total: number): string {
  const f = total <= 0 ? 1 : Math.min(1, done / total);
  return `${(f * 100).toFixed(1)}%`;
}

/** The parts of the control socket's `status` answer the view reads. */
export type StatusForView = Pick<AgentStatus, 'robot_id' | 'name' | 'recording_state' | 'episode_id' | 'connected' | 'outbox' | 'sync'> & { uploads?: UploadProgressView[] };

export function formatStatus(status: StatusForView, opts: { tty: boolean; columns?: number }): string {
  const lines: string[] = [];
  const robot = `${status.name} (${status.robot_id})`;
  const recording = status.episode_id ? `${status.recording_state} ${status.episode_id}` : status.recording_state;
  const outbox = `${status.outbox.pending} pending, ${status.outbox.refused} refused`;
  const sync = status.sync ? `${status.sync.open} open (${status.sync.failing} failing), ${status.sync.uploading} uploading, ${status.sync.verified} verified` : 'off';
  if (opts.tty) {
    lines.push(`robot      ${robot}`, `recording  ${recording}`, `connected  ${status.connected ? 'yes' : 'no'}`, `outbox     ${outbox}`, `sync       ${sync}`);
  } else {
    lines.push(`robot=${status.robot_id} name=${status.name} recording=${status.recording_state} connected=${status.connected}`);
    lines.push(`outbox ${outbox}`);
    lines.push(`sync ${sync}`);
  }
  const uploads = status.uploads ?? [];
  if (uploads.length === 0) {
    lines.push(opts.tty ? '\nno pending uploads' : 'uploads none');
    return `${lines.join('\n')}\n`;
  }
  if (opts.tty) {
    lines.push('');
    const byEpisode = new Map<string, UploadProgressView[]>();
    for (const u of uploads) byEpisode.set(u.episode_id, [...(byEpisode.get(u.episode_id) ?? []), u]);
    const barWidth = Math.max(10, Math.min(40, (opts.columns ?? 100) - 70));
    // Terminal columns (string-width), not UTF-16 code units: wide and combining characters line up.
    const dstWidth = Math.max(...uploads.map((u) => stringWidth(u.destination_id)));
    for (const [episode, replicas] of byEpisode) {
      lines.push(episode);
      for (const u of replicas) {
        const parts = [
          `  ${u.destination_id}${' '.repeat(dstWidth - stringWidth(u.destination_id))}`,
          progressBar(u.bytes_sent, u.bytes_total, barWidth),
          percent(u.bytes_sent, u.bytes_total).padStart(6),
          `${formatBytes(u.bytes_sent)} / ${formatBytes(u.bytes_total)}`,
          u.active && u.rate_bps > 0 ? formatRate(u.rate_bps) : '',
          stateLabel(u),
        ].filter((p) => p !== '');
        lines.push(parts.join('  '));
        if (u.last_error) lines.push(`    last error: ${u.last_error}`);
        else if (u.note) lines.push(`    note: ${u.note}`);
      }
    }
  } else {
    for (const u of uploads) {
      const fields = [
        `upload episode=${u.episode_id}`,
        `destination=${u.destination_id}`,
        `state=${u.state}`,
        `active=${u.active}`,
        `bytes_sent=${u.bytes_sent}`,
        `bytes_total=${u.bytes_total}`,
        `percent=${percent(u.bytes_sent, u.bytes_total)}`,
        `rate_bps=${u.rate_bps}`,
        ...(u.next_attempt_at ? [`next_attempt_at=${u.next_attempt_at}`] : []),
        ...(u.last_error ? [`last_error=${JSON.stringify(u.last_error)}`] : []),
      ];
      lines.push(fields.join(' '));
    }
  }
  return `${lines.join('\n')}\n`;
}

function stateLabel(u: UploadProgressView): string {
  if (u.active) return u.state === 'assigned' ? 'assigned (asking for a grant)' : u.state;
  return u.next_attempt_at ? `${u.state}, next attempt ${u.next_attempt_at}` : u.state;
}
