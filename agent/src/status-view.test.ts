import stringWidth from 'string-width';
import { describe, expect, it } from 'vitest';
import { formatBytes, formatStatus, progressBar, type StatusForView } from './status-view.js';
import type { UploadProgressView } from './sync/progress.js';

const base: StatusForView = {
  robot_id: 'rbt_1',
  name: 'arm-1',
  recording_state: 'idle',
  episode_id: null,
  connected: true,
  outbox: { pending: 2, refused: 0 },
  sync: { open: 2, failing: 1, verified: 5, settled: 0, uploading: 1 },
};

const upload = (u: Partial<UploadProgressView>): UploadProgressView => ({
  episode_id: 'ep_1',
  destination_id: 'dst_a',
  state: 'syncing',
  active: true,
  bytes_sent: 512 * 1024 * 1024,
  bytes_total: 2 * 1024 ** 3,
  rate_bps: 12.5 * 1024 * 1024,
  last_error: null,
  note: null,
  next_attempt_at: null,
  ...u,
});

describe('status view', () => {
  it('units and bars', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1536)).toBe('1.50 KiB');
    expect(formatBytes(2 * 1024 ** 3)).toBe('2.00 GiB');
    expect(formatBytes(300 * 1024 * 1024)).toBe('300 MiB');
    expect(progressBar(1, 4, 8)).toBe('[##------]');
    expect(progressBar(5, 4, 4)).toBe('[####]');
    expect(progressBar(0, 0, 4)).toBe('[####]');
  });

  it('on a terminal: a bar per destination under each episode, rate while sending, the last error below', () => {
    const out = formatStatus(
      {
        ...base,
        uploads: [
          upload({}),
          upload({ destination_id: 'dst_backup', state: 'granted', active: false, bytes_sent: 0, rate_bps: 0, last_error: 'upload_failed: PUT recording.mcap answered 500; retrying at 2026-01-01T00:10:00.000Z', next_attempt_at: '2026-01-01T00:10:00.000Z' }),
        ],
      },
      { tty: true, columns: 110 },
    );
    const lines = out.split('\n');
    expect(lines).toContain('robot      arm-1 (rbt_1)');
    expect(lines).toContain('sync       2 open (1 failing), 1 uploading, 5 verified');
    const ep = lines.indexOf('ep_1');
    expect(ep).toBeGreaterThan(0);
    expect(lines[ep + 1]).toBe(`  dst_a       [##########${'-'.repeat(30)}]   25.0%  512 MiB / 2.00 GiB  12.5 MiB/s  syncing`);
    expect(lines[ep + 2]).toMatch(/^ {2}dst_backup {2}\[-{40}\] {4}0\.0% {2}0 B \/ 2\.00 GiB {2}granted, next attempt 2026-01-01T00:10:00\.000Z$/);
    expect(lines[ep + 3]).toBe('    last error: upload_failed: PUT recording.mcap answered 500; retrying at 2026-01-01T00:10:00.000Z');
  });

  it('on a terminal: the bars line up after wide (CJK) and combining characters', () => {
    const ids = ['dst_a', 'dst_\u76ee\u6807', 'dst_e\u0301e\u0301']; // 5, 8 and 6 columns; 5, 6 and 8 code units
    const out = formatStatus({ ...base, uploads: ids.map((destination_id) => upload({ destination_id })) }, { tty: true, columns: 110 });
    const rows = out.split('\n').filter((l) => l.includes('['));
    expect(rows).toHaveLength(3);
    expect(rows.map((l) => stringWidth(l.slice(0, l.indexOf('['))))).toEqual([12, 12, 12]);
    expect(rows[1]).toMatch(/^ {2}dst_\u76ee\u6807 {2}\[/);
  });

  it('in a pipe: one key=value line per upload, no bars', () => {
    const out = formatStatus({ ...base, uploads: [upload({ last_error: 'network: ECONNRESET' })] }, { tty: false });
    expect(out).not.toContain('[');
    expect(out.split('\n')).toContain(
      `upload episode=ep_1 destination=dst_a state=syncing active=true bytes_sent=${512 * 1024 * 1024} bytes_total=${2 * 1024 ** 3} percent=25.0% rate_bps=${12.5 * 1024 * 1024} last_error="network: ECONNRESET"`,
    );
    expect(out.startsWith('robot=rbt_1 name=arm-1 recording=idle connected=true\n')).toBe(true);
  });

  it('says so when nothing is pending', () => {
    expect(formatStatus(base, { tty: false })).toContain('uploads none');
    expect(formatStatus({ ...base, sync: null }, { tty: true })).toContain('sync       off');
  });
});
