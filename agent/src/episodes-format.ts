import type { EpisodeView } from './episodes-view.js';
import { formatBytes } from './status-view.js';

/** `fleet-agent episodes list|show` for people (the data comes from episodes-view.ts). */

function percent(done: number, total: number): string {
  return `${((total <= 0 ? 1 : Math.min(1, done / total)) * 100).toFixed(1)}%`;
}

function stateLine(v: EpisodeView): string {
  const parts: string[] = [v.state];
  if (v.outcome) parts.push(v.outcome);
  if (v.interrupted) parts.push('interrupted');
  return parts.join(', ');
}

/**
 * An episode as lines of text: the id and state, the directory, each file with its size, then
 * each destination's replica. `detail` (show) adds times and checksums.
 */
export function formatEpisode(v: EpisodeView, opts: { detail: boolean }): string {
  const lines = [`${v.id}  ${stateLine(v)}  ${formatBytes(v.total_bytes)}`];
  if (opts.detail) {
    lines.push(`  started    ${v.started_at}`);
    if (v.ended_at) lines.push(`  ended      ${v.ended_at}`);
    if (v.finalized_at) lines.push(`  finalized  ${v.finalized_at}`);
  }
  lines.push(`  dir        ${v.dir}`);
  if (v.files.length === 0) lines.push('  files      none');
  for (const f of v.files) {
    const size = f.size_bytes === null ? (v.pruned_at ? 'pruned' : 'missing') : formatBytes(f.size_bytes);
    lines.push(`  file       ${f.path}  ${size}${opts.detail && f.sha256 ? `  sha256 ${f.sha256}` : ''}`);
  }
  if (v.state === 'finalized' || v.state === 'pruned') {
    if (v.sync.length === 0) lines.push('  sync       no destination assigned');
    for (const r of v.sync) {
      const when = r.active ? 'uploading now' : r.next_attempt_at ? `next attempt ${r.next_attempt_at}` : '';
      lines.push(
        `  sync       ${[r.destination_id, r.state, `${formatBytes(r.bytes_sent)} / ${formatBytes(r.bytes_total)} (${percent(r.bytes_sent, r.bytes_total)})`, when].filter((p) => p !== '').join('  ')}`,
      );
      if (r.last_error) lines.push(`    last error: ${r.last_error}`);
      else if (r.note) lines.push(`    note: ${r.note}`);
    }
    if (v.pruned_at) lines.push(`  pruned     ${v.pruned_at}`);
    else if (v.prune_due_at) lines.push(`  prune due  ${v.prune_due_at}`);
    if (v.local_missing_at) lines.push(`  missing    files found missing at ${v.local_missing_at}`);
  }
  return lines.join('\n');
}

export function formatEpisodeList(views: readonly EpisodeView[]): string {
  if (views.length === 0) return 'no episodes\n';
  return `${views.map((v) => formatEpisode(v, { detail: false })).join('\n\n')}\n`;
}
