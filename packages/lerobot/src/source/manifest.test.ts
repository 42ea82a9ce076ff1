import { describe, expect, it } from 'vitest';
import { parseManifest, parseManifestLine } from './manifest.js';

const header = { dataset_id: 'ds_1', name: 'pick successes', filter: { task_id: 'pick-cube' }, snapshot_at: '2026-11-23T12:00:00.000Z', episode_count: 1 };
const episode = {
  id: 'ep_0123456789',
  robot_id: 'rbt_1',
  recording_session_id: 'rs_1',
  task_id: 'pick-cube',
  task_name: null,
  outcome: 'success',
  metadata: { site: 'lab' },
  started_at: '2026-11-23T11:00:00.000Z',
  ended_at: null,
  files: [{ path: 'recording.mcap', size_bytes: 10, sha256: 'a'.repeat(64) }],
  locations: [{ destination_id: 'dst_1', state: 'verified', object_key: 'fleet/org/rbt_1/ep_0123456789/', grant_id: 'g_1' }],
};

describe('parseManifestLine', () => {
  it('tells the header from an episode and keeps the fields it does not check', () => {
    expect(parseManifestLine(JSON.stringify(header), 1)).toEqual({ kind: 'header', header });
    const line = parseManifestLine(JSON.stringify(episode), 2);
    expect(line.kind).toBe('episode');
    expect(line.kind === 'episode' && line.episode.recording_session_id).toBe('rs_1');
  });

  it('names the line and the field', () => {
    expect(() => parseManifestLine('{"id":', 7)).toThrow(/^manifest_invalid: manifest line 7: not JSON/);
    expect(() => parseManifestLine('[1]', 3)).toThrow('manifest line 3: not a JSON object');
    expect(() => parseManifestLine(JSON.stringify({ ...episode, files: [{ ...episode.files[0], sha256: 'x' }] }), 4)).toThrow(/manifest line 4 \(episode\): files\.0\.sha256/);
    expect(() => parseManifestLine(JSON.stringify({ ...episode, files: [{ ...episode.files[0], path: '../etc/passwd' }] }), 5)).toThrow(/line 5.*files\.0\.path/);
    expect(() => parseManifestLine(JSON.stringify({ ...header, episode_count: -1 }), 1)).toThrow(/manifest line 1 \(header\): episode_count/);
    expect(() => parseManifestLine(JSON.stringify({ ...episode, id: undefined }), 9)).toThrow(/line 9 \(episode\): id/);
  });
});

describe('parseManifest', () => {
  it('reads the header then the episodes, skipping blank lines', () => {
    const m = parseManifest(`${JSON.stringify(header)}\n${JSON.stringify(episode)}\n\n`);
    expect(m.header.dataset_id).toBe('ds_1');
    expect(m.episodes.map((e) => e.id)).toEqual(['ep_0123456789']);
  });

  it('refuses a missing or misplaced header', () => {
    expect(() => parseManifest(JSON.stringify(episode))).toThrow('manifest line 1: an episode before the header line');
    expect(() => parseManifest(`${JSON.stringify(header)}\n${JSON.stringify(header)}`)).toThrow('manifest line 2: a header after the first line');
    expect(() => parseManifest('')).toThrow(/no header/);
  });
});
