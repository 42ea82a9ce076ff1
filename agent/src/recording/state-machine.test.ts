import { createHash } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { McapStreamReader } from '@mcap/core';
import { afterEach, describe, expect, it } from 'vitest';
import { IllegalTransitionError } from '../errors.js';
import { EPISODE_ID_PATTERN } from '../ids.js';
import { openTestMachine, removeTempDirs, type TestMachine } from '../test-support.js';
import type { EpisodeFacts, EpisodeManifest } from '../rules/episode-facts.js';
import type { RecordingState } from './state-machine.js';

const open: TestMachine[] = [];
async function machine(opts: Parameters<typeof openTestMachine>[0] = {}): Promise<TestMachine> {
  const t = await openTestMachine(opts);
  open.push(t);
  return t;
}

afterEach(async () => {
  for (const t of open.splice(0)) await t.close();
  await removeTempDirs();
});

/** Records for `ms` of manual time and lets the recorder's writes land. */
async function record(t: TestMachine, ms: number): Promise<void> {
  for (let done = 0; done < ms; done += 100) {
    t.scheduler.advance(Math.min(100, ms - done));
    await t.recorder.settled();
  }
}

async function episodeDirs(t: TestMachine): Promise<string[]> {
  return (await readdir(join(t.dataDir, 'episodes')).catch(() => [] as string[])).sort();
}

/** Everything observable about the machine and its store, to show a refusal changed nothing. */
async function snapshot(t: TestMachine) {
  return {
    state: t.machine.state,
    status: t.machine.status(),
    recording: await t.store.recording.get(),
    episodes: await t.store.episodes.ids(),
    dirs: await episodeDirs(t),
    session: await t.store.sessions.current(),
  };
}

async function readMcap(path: string): Promise<{ messages: number; payloadBytes: number; footer: boolean }> {
  const reader = new McapStreamReader();
  reader.append(await readFile(path));
  const out = { messages: 0, payloadBytes: 0, footer: false };
  for (let rec = reader.nextRecord(); rec; rec = reader.nextRecord()) {
    if (rec.type === 'Message') {
      out.messages += 1;
      out.payloadBytes += rec.data.byteLength;
    }
    if (rec.type === 'Footer') out.footer = true;
  }
  return out;
}

/** The recorder sizes camera frames in whole pixel rows, so its payload is the rate's to within 3 %. */
function expectAbout(actual: number, expected: number): void {
  expect(actual).toBeGreaterThan(expected * 0.97);
  expect(actual).toBeLessThan(expected * 1.03);
}

async function readJson<T>(path: string): Promise<T> {
  return JSON.parse(await readFile(path, 'utf8')) as T;
}

describe('RecordingStateMachine: the spec table', () => {
  it('idle + start -> recording, with a robot-made episode id in session 1', async () => {
    const t = await machine();
    const states: RecordingState[] = [];
    t.machine.on('state', (c) => states.push(c.to));
    const r = await t.machine.start({ source: 'test' });
    expect(r.recording_state).toBe('recording');
    expect(r.episode_id).toMatch(EPISODE_ID_PATTERN);
    expect(r.recording_session_id).toMatch(/^rs_[a-z2-7]{26}$/);
    expect(r.episode_seq).toBe(1);
    expect(t.machine.state).toBe('recording');
    expect(states).toEqual(['recording']);
    expect((await t.store.recording.get())?.state).toBe('recording');
    expect(await episodeDirs(t)).toEqual([r.episode_id]);
  });

  for (const [verb, outcome] of [
    ['finish', 'success'],
    ['fail', 'failure'],
  ] as const) {
    it(`recording + ${verb} -> finalizing -> idle with outcome ${outcome}, files kept`, async () => {
      const t = await machine();
      const started = await t.machine.start();
      await record(t, 1000);
      const states: RecordingState[] = [];
      t.machine.on('state', (c) => states.push(c.to));
      const ended = await t.machine.apply(verb);
      expect(ended).toMatchObject({ episode_id: started.episode_id, recording_state: 'finalizing', outcome });
      await t.machine.whenSettled();
      expect(t.machine.state).toBe('idle');
      expect(states).toEqual(['finalizing', 'idle']);
      const row = await t.store.episodes.get(started.episode_id);
      expect(row).toMatchObject({ outcome, interrupted: false });
      expect(row?.facts.outcome).toBe(outcome);
      expect(row?.manifest.files.map((f) => f.path)).toEqual(['recording.mcap']);
      expect(await t.store.recording.get()).toBeUndefined();
    });
  }

  it('recording + discard -> discarded: recorded files deleted, the row and facts kept', async () => {
    const t = await machine();
    const started = await t.machine.start();
    await record(t, 500);
    const dir = join(t.dataDir, 'episodes', started.episode_id);
    expect((await readdir(dir)).includes('recording.mcap')).toBe(true);
    await t.machine.discard();
    await t.machine.whenSettled();
    expect(t.machine.state).toBe('idle');
    expect((await readdir(dir)).sort()).toEqual(['episode.json', 'manifest.json']);
    const row = await t.store.episodes.get(started.episode_id);
    expect(row?.outcome).toBe('discarded');
    expect(row?.manifest).toEqual({ files: [], total_bytes: 0 });
    const facts = await readJson<EpisodeFacts>(join(dir, 'episode.json'));
    expect(facts).toMatchObject({ id: started.episode_id, outcome: 'discarded', bag_size_bytes: 0 });
    expect(facts.message_count).toBeGreaterThan(0);
  });

  for (const verb of ['finish', 'fail', 'discard'] as const) {
    it(`idle + ${verb} is refused with invalid_state and changes nothing`, async () => {
      const t = await machine();
      await t.machine.start();
      await t.machine.finish();
      await t.machine.whenSettled();
      const before = await snapshot(t);
      const err = await t.machine.apply(verb).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(IllegalTransitionError);
      expect((err as IllegalTransitionError).code).toBe('invalid_state');
      expect(await snapshot(t)).toEqual(before);
    });
  }

  it('recording + start is refused and the running episode goes on', async () => {
    const t = await machine();
    await t.machine.start();
    await record(t, 200);
    const before = await snapshot(t);
    await expect(t.machine.start()).rejects.toMatchObject({ name: 'IllegalTransitionError', code: 'invalid_state', state: 'recording' });
    expect(await snapshot(t)).toEqual(before);
  });

  it('finalizing refuses every verb, changing nothing, then returns to idle', async () => {
    const t = await machine({ finalizingDelayMs: 3000 });
    const started = await t.machine.start();
    await record(t, 300);
    await t.machine.finish();
    expect(t.machine.state).toBe('finalizing');
    const before = await snapshot(t);
    for (const verb of ['start', 'finish', 'fail', 'discard'] as const) {
      await expect(t.machine.apply(verb)).rejects.toMatchObject({ code: 'invalid_state', state: 'finalizing' });
    }
    expect(await snapshot(t)).toEqual(before);
    expect(await t.store.episodes.get(started.episode_id)).toBeUndefined();
    t.scheduler.advance(3000);
    await t.machine.whenSettled();
    expect(t.machine.state).toBe('idle');
    expect((await t.store.episodes.get(started.episode_id))?.outcome).toBe('success');
    // Capture ended with the verb: the time spent finalizing recorded nothing (3 s more would be 10 times as much).
    const mcap = await readMcap(join(t.dataDir, 'episodes', started.episode_id, 'recording.mcap'));
    expectAbout(mcap.payloadBytes, Math.floor(0.3 * 64 * 1024));
  });
});

describe('finalize: manifest, facts, MCAP', () => {
  it('writes a manifest whose sizes and sha256 match the files on disk', async () => {
    const t = await machine({ bytesPerSecond: 100_000 });
    const { episode_id } = await t.machine.start();
    await record(t, 2500);
    await t.machine.finish();
    await t.machine.whenSettled();
    const dir = join(t.dataDir, 'episodes', episode_id);
    const manifest = await readJson<EpisodeManifest>(join(dir, 'manifest.json'));
    expect(manifest.files.length).toBe(1);
    let total = 0;
    for (const f of manifest.files) {
      const bytes = await readFile(join(dir, f.path));
      expect(f.size_bytes).toBe(bytes.length);
      expect(f.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
      total += bytes.length;
    }
    expect(manifest.total_bytes).toBe(total);
    // The payload follows the manual clock: 2.5 s at 100 kB/s, plus MCAP framing.
    expect(total).toBeGreaterThan(250_000);
    const facts = await readJson<EpisodeFacts>(join(dir, 'episode.json'));
    expect(facts.bag_size_bytes).toBe(total);
    expect((await t.store.episodes.get(episode_id))?.manifest).toEqual(manifest);

    // A real MCAP file: readable to the end, with as many messages as the facts say, carrying
    // the payload the manual clock owed (2.5 s at 100 kB/s) to within a camera frame's rounding.
    const mcap = await readMcap(join(dir, 'recording.mcap'));
    expect(mcap.footer).toBe(true);
    expect(mcap.messages).toBe(facts.message_count);
    expectAbout(mcap.payloadBytes, 250_000);
  });

  it('stamps the operator context taken at start, not later changes', async () => {
    const t = await machine();
    await t.machine.setContext({
      task_id: 'task_fold',
      task_name: 'Fold towel',
      subtask_id: 'st_grasp',
      subtask_name: 'Grasp',
      operator_id: 'op_7',
      operator_name: 'Ada',
      control_mode: 'teleop',
      policy_version_id: 'pv_3',
      eval_id: 'eval_1',
      session_name: 'morning',
    });
    const started = t.clock.now();
    const { episode_id, recording_session_id } = await t.machine.start();
    await t.machine.setContext({ task_id: 'task_other', operator_name: 'Bob' });
    await record(t, 1500);
    await t.machine.finish();
    await t.machine.whenSettled();
    const facts = (await t.store.episodes.get(episode_id))!.facts;
    expect(facts).toMatchObject({
      id: episode_id,
      robot_id: t.robotId,
      recording_session_id,
      episode_seq: 1,
      session_name: 'morning',
      task_id: 'task_fold',
      task_name: 'Fold towel',
      subtask_id: 'st_grasp',
      operator_id: 'op_7',
      operator_name: 'Ada',
      control_mode: 'teleop',
      policy_version_id: 'pv_3',
      eval_id: 'eval_1',
      outcome: 'success',
      started_at: new Date(started).toISOString(),
      ended_at: new Date(started + 1500).toISOString(),
      duration_s: 1.5,
      metadata: {},
    });
    const onDisk = await readJson<EpisodeFacts>(join(t.dataDir, 'episodes', episode_id, 'episode.json'));
    expect(onDisk).toEqual(facts);
  });

  it('computes segments from the subtask steps taken while recording', async () => {
    const t = await machine();
    await t.machine.setContext({ subtask_id: 'st_a', subtask_name: 'Reach' });
    const { episode_id } = await t.machine.start();
    await record(t, 1000);
    await t.machine.setContext({ subtask_id: 'st_b', subtask_name: 'Grasp' });
    await record(t, 500);
    await t.machine.setContext({ subtask_id: 'st_b', subtask_name: 'Grasp' }); // same subtask: no new segment
    await record(t, 500);
    await t.machine.setContext({ subtask_id: null, subtask_name: null }); // a gap
    await record(t, 250);
    await t.machine.setContext({ subtask_id: 'st_c', subtask_name: 'Lift' });
    await record(t, 750);
    await t.machine.finish();
    await t.machine.whenSettled();
    expect((await t.store.episodes.get(episode_id))!.facts.segments).toEqual([
      { segment_index: 0, subtask_id: 'st_a', subtask_name: 'Reach', start_offset_s: 0, end_offset_s: 1 },
      { segment_index: 1, subtask_id: 'st_b', subtask_name: 'Grasp', start_offset_s: 1, end_offset_s: 2 },
      { segment_index: 2, subtask_id: 'st_c', subtask_name: 'Lift', start_offset_s: 2.25, end_offset_s: 3 },
    ]);
  });

  it('counts episode_seq within a session and starts a new session on a new session name', async () => {
    const t = await machine();
    const seqs: [string, number][] = [];
    for (const name of ['s1', 's1', 's1', 's2', 's2']) {
      await t.machine.setContext({ session_name: name });
      const r = await t.machine.start();
      await t.machine.finish();
      await t.machine.whenSettled();
      seqs.push([r.recording_session_id, r.episode_seq]);
    }
    expect(seqs.map(([, n]) => n)).toEqual([1, 2, 3, 1, 2]);
    expect(new Set(seqs.slice(0, 3).map(([s]) => s)).size).toBe(1);
    expect(seqs[3]![0]).not.toBe(seqs[0]![0]);
    expect(seqs[4]![0]).toBe(seqs[3]![0]);
    const facts = (await t.store.episodes.list()).map((e) => e.facts.session_name);
    expect(facts).toEqual(['s1', 's1', 's1', 's2', 's2']);
  });

  it('episode ids sort by start time', async () => {
    const t = await machine();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      ids.push((await t.machine.start()).episode_id);
      await t.machine.fail();
      await t.machine.whenSettled();
      t.clock.advance(1000);
    }
    expect([...ids].sort()).toEqual(ids);
  });
});

describe('crash recovery', () => {
  it('finalizes a recording left in `recording` as an interrupted failure with its files, then is idle', async () => {
    const first = await machine();
    const { episode_id } = await first.machine.start();
    await record(first, 12_000); // past two alive notes (every 5 s)
    await first.recorder.settled();
    // kill -9: nothing is closed; the store is simply abandoned.
    const dir = join(first.dataDir, 'episodes', episode_id);
    const size = (await stat(join(dir, 'recording.mcap'))).size;
    expect(size).toBeGreaterThan(0);

    const second = await machine({ dataDir: first.dataDir, clock: first.clock, robotId: first.robotId, init: false });
    second.clock.advance(60_000);
    await second.machine.init();
    expect(second.machine.state).toBe('idle');
    expect(await second.store.recording.get()).toBeUndefined();
    const row = await second.store.episodes.get(episode_id);
    expect(row).toMatchObject({ outcome: 'failure', interrupted: true });
    expect(row!.facts.metadata).toEqual({ interrupted: true });
    expect(row!.facts.duration_s).toBeGreaterThanOrEqual(10);
    expect(row!.facts.duration_s).toBeLessThanOrEqual(12);
    expect(row!.manifest.files).toEqual([
      { path: 'recording.mcap', size_bytes: size, sha256: createHash('sha256').update(await readFile(join(dir, 'recording.mcap'))).digest('hex') },
    ]);
    // The MCAP stays as the crash left it (no summary, no footer): what can be read is counted.
    const mcap = await readMcap(join(dir, 'recording.mcap'));
    expect(mcap.footer).toBe(false);
    expect(mcap.messages).toBeGreaterThan(0);
    expect(row!.facts.message_count).toBe(mcap.messages);
    expect(second.logs.messages()).toContain('recovering a recording interrupted by a crash');
    // And it records again normally.
    const next = await second.machine.start();
    expect(next.episode_seq).toBe(2);
  });

  it('a recording row left without any file still finalizes (failure, interrupted, no files)', async () => {
    const t = await machine({ init: false });
    await t.store.recording.begin({
      recording: {
        state: 'recording',
        episodeId: 'ep_2222222222aaaaaaaaaaaaaaaa',
        recordingSessionId: 'rs_2222222222aaaaaaaaaaaaaaaa',
        sessionName: null,
        episodeSeq: 1,
        startedAt: t.clock.now() - 5000,
        aliveAt: t.clock.now() - 2000,
        endedAt: null,
        outcome: null,
        context: { ...(await t.store.context.get()), task_id: 'task_x' },
        dir: 'episodes/ep_2222222222aaaaaaaaaaaaaaaa',
      },
      session: { id: 'rs_2222222222aaaaaaaaaaaaaaaa', name: null, nextSeq: 1, createdAt: t.clock.now() - 5000 },
    });
    await t.machine.init();
    expect(t.machine.state).toBe('idle');
    const row = await t.store.episodes.get('ep_2222222222aaaaaaaaaaaaaaaa');
    expect(row).toMatchObject({ outcome: 'failure', interrupted: true, manifest: { files: [], total_bytes: 0 } });
    expect(row!.facts).toMatchObject({ task_id: 'task_x', duration_s: 3, metadata: { interrupted: true } });
  });

  it('a crash in finalizing after finish keeps the files, records failure and the requested outcome', async () => {
    const first = await machine({ finalizingDelayMs: 10_000 });
    const { episode_id } = await first.machine.start();
    await record(first, 1000);
    await first.machine.finish(); // acknowledged; then kill -9 during the finalizing delay
    const second = await machine({ dataDir: first.dataDir, clock: first.clock, robotId: first.robotId });
    expect(second.machine.state).toBe('idle');
    const row = await second.store.episodes.get(episode_id);
    expect(row).toMatchObject({ outcome: 'failure', interrupted: true });
    expect(row!.facts.metadata).toEqual({ interrupted: true, requested_outcome: 'success' });
    expect(row!.manifest.files.map((f) => f.path)).toEqual(['recording.mcap']);
  });

  it('a crash in finalizing after discard completes the discard', async () => {
    const first = await machine({ finalizingDelayMs: 10_000 });
    const { episode_id } = await first.machine.start();
    await record(first, 1000);
    await first.machine.discard();
    const second = await machine({ dataDir: first.dataDir, clock: first.clock, robotId: first.robotId });
    const row = await second.store.episodes.get(episode_id);
    expect(row).toMatchObject({ outcome: 'discarded', interrupted: true, manifest: { files: [], total_bytes: 0 } });
    expect((await readdir(join(second.dataDir, 'episodes', episode_id))).sort()).toEqual(['episode.json', 'manifest.json']);
  });

  it('close() while recording leaves it for the next start, which finalizes it as interrupted', async () => {
    const first = await openTestMachine();
    const { episode_id } = await first.machine.start();
    await record(first, 700);
    await first.close();
    const second = await machine({ dataDir: first.dataDir, clock: first.clock, robotId: first.robotId });
    const row = await second.store.episodes.get(episode_id);
    expect(row).toMatchObject({ outcome: 'failure', interrupted: true });
    // The recorder was stopped cleanly, so its messages can all be counted again.
    expect(row!.facts.message_count).toBeGreaterThan(0);
    expect(row!.facts.duration_s).toBe(0.7);
  });

  it('removes an episode directory that no recording owns', async () => {
    const first = await machine();
    const kept = await first.machine.start();
    await first.machine.finish();
    await first.machine.whenSettled();
    const { mkdir, writeFile } = await import('node:fs/promises');
    const orphan = join(first.dataDir, 'episodes', 'ep_3333333333bbbbbbbbbbbbbbbb');
    await mkdir(orphan);
    await writeFile(join(orphan, 'recording.mcap'), 'partial');
    const second = await machine({ dataDir: first.dataDir, clock: first.clock, robotId: first.robotId });
    expect(await episodeDirs(second)).toEqual([kept.episode_id]);
  });
});
