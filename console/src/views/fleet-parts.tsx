import type { Robot, SyncHealthRow } from '@fleet/client';
import { Pill } from '../ui/components.js';
import { formatBytes, formatHoursToFull, formatTime, timeAgo } from '../ui/format.js';
import { CodeTags } from '../ui/resource-page.js';

/** Pieces the fleet list and the robot page both show: presence, recording state, sync health. */

export function PresencePill({ robot, now }: { robot: Pick<Robot, 'connected' | 'last_seen_at' | 'deenrolled_at'>; now: number }) {
  if (robot.deenrolled_at) return <Pill tone="idle">de-enrolled</Pill>;
  if (robot.connected) return <Pill tone="ok">online</Pill>;
  return (
    <span class="fleet-presence">
      <Pill tone="bad">offline</Pill>{' '}
      <span class="muted small" title={robot.last_seen_at ? `last seen ${formatTime(robot.last_seen_at)}` : undefined}>
        {robot.last_seen_at ? `last seen ${timeAgo(robot.last_seen_at, now)}` : 'never seen'}
      </span>
    </span>
  );
}

export function RecordingPill({ state }: { state: Robot['recording_state'] }) {
  if (state === null) return <span class="muted">–</span>;
  return <Pill tone={state === 'recording' ? 'info' : state === 'finalizing' ? 'warn' : 'idle'}>{state}</Pill>;
}

export function Capabilities({ list }: { list: readonly string[] }) {
  if (list.length === 0) return <span class="muted">none announced</span>;
  return <CodeTags codes={list} />;
}

/** Under a day to full is an alert, under three days a warning. */
export function pressureTone(hours: number | null | undefined): 'bad' | 'warn' | null {
  if (hours === null || hours === undefined) return null;
  return hours < 24 ? 'bad' : hours < 72 ? 'warn' : null;
}

export function DiskCell({ row }: { row: SyncHealthRow | undefined }) {
  const p = row?.pressure;
  if (!p) return <span class="muted">no report</span>;
  const tone = pressureTone(p.hours_to_full);
  const full = formatHoursToFull(p.hours_to_full);
  return (
    <span class="fleet-disk" title={`reported ${formatTime(p.reported_at)}`}>
      {tone ? <Pill tone={tone}>{p.hours_to_full === null ? full : `${full} to full`}</Pill> : <span>{p.hours_to_full === null ? full : `${full} to full`}</span>}
      <span class="muted small">{formatBytes(p.free_bytes)} free</span>
    </span>
  );
}

export function UnverifiedCell({ row }: { row: SyncHealthRow | undefined }) {
  if (!row) return <span class="muted">–</span>;
  return (
    <span class="fleet-unverified">
      <span>
        {row.unverified.toLocaleString()} <span class="muted small">({formatBytes(row.bytes_unverified)})</span>
      </span>
      {row.unverified_over_72h > 0 ? <Pill tone="bad">{row.unverified_over_72h.toLocaleString()} over 72 h</Pill> : null}
    </span>
  );
}

export function LocalMissingCell({ row }: { row: SyncHealthRow | undefined }) {
  if (!row) return <span class="muted">–</span>;
  return row.local_missing > 0 ? <Pill tone="warn">{row.local_missing.toLocaleString()}</Pill> : <span>0</span>;
}
