import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { appendFile, mkdir, readdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { McapWriter } from '@mcap/core';
import { ManualClock, systemClock, type Clock } from '@fleet/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { ensurePythonEnv } from '../../../test/support/python.js';
import { IllegalTransitionError } from '../errors.js';
import { openAgentStore, type SqliteAgentStore } from '../store/sqlite.js';
import { captureLogs, fakeRobotId, makeTempDir, removeTempDirs, type LogCapture } from '../test-support.js';
import { ManualScheduler, systemScheduler, type Scheduler } from '../time.js';
import { checkImportRecorderConfig, ImportRecorder, ImportRecorderConfigSchema, type ImportRecorderConfig } from './import-recorder.js';
import { ImportWatcher } from './import-watcher.js';
import { episodeReportMsgId } from './report.js';
import { RecordingStateMachine } from './state-machine.js';

interface Rig {
  machine: RecordingStateMachine;
  recorder: ImportRecorder;
  watcher: ImportWatcher;
  store: SqliteAgentStore;
  logs: LogCapture;
  scheduler: Scheduler;
  dataDir: string;
  folder: string;
  /** Stops cleanly, as `fleet-agent` does on SIGTERM. */
  close(): Promise<void>;
}

const open: SqliteAgentStore[] = [];
afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
  await removeTempDirs();
});

/**
 * A real state machine, import recorder, watcher and SQLite store on `dataDir`. Opening a second
 * rig on the same directories without closing the first is what kill -9 leaves behind.
 */
async function rig(
  opts: { dataDir?: string; folder?: string; robotId?: string; clock?: Clock; scheduler?: Scheduler; config?: Partial<ImportRecorderConfig> } = {},
): Promise<Rig> {
  const root = opts.dataDir ? undefined : await makeTempDir();
  const dataDir = opts.dataDir ?? join(root!, 'data');
  const folder = opts.folder ?? join(root!, 'import');
  await mkdir(folder, { recursive: true });
  const clock = opts.clock ?? new ManualClock();
  const scheduler = opts.scheduler ?? new ManualScheduler(clock as ManualClock);
  const logs = captureLogs();
  const store = openAgentStore(dataDir, clock);
  open.push(store);
  const config = ImportRecorderConfigSchema.parse({ kind: 'import', folder, poll_ms: 100, ...opts.config });
  const recorder = new ImportRecorder(config, { clock, scheduler, logger: logs.logger });
  const machine = new RecordingStateMachine({
    store,
    recorder,
    robotId: opts.robotId ?? fakeRobotId(),
    dataDir,
    clock,
    scheduler,
    logger: logs.logger,
    finalizingDelayMs: 0,
    finalizeRetryMs: 1000,
  });
  await machine.init();
  const watcher = new ImportWatcher({ config, machine, recorder, store, dataDir, clock, scheduler, logger: logs.logger });
  return {
    machine,
    recorder,
    watcher,
    store,
    logs,
    scheduler,
    dataDir,
    folder,
    async close() {
      await watcher.stop();
      await machine.close();
      await store.close();
    },
  };
}

/** A real MCAP written by @mcap/core's writer: `messages` JSON messages `stepMs` apart from `startMs`. */
async function mcap(opts: { startMs: number; messages: number; stepMs?: number; statistics?: boolean }): Promise<Buffer> {
  const parts: Buffer[] = [];
  let position = 0n;
  const writer = new McapWriter({
    writable: {
      position: () => position,
      write: async (b: Uint8Array) => {
        parts.push(Buffer.from(b));
        position += BigInt(b.byteLength);
      },
    },
    useStatistics: opts.statistics ?? true,
    chunkSize: 256,
  });
  const enc = (s: string) => new TextEncoder().encode(s);
  await writer.start({ profile: '', library: 'import-recorder.test' });
  const schemaId = await writer.registerSchema({ name: 'Tick', encoding: 'jsonschema', data: enc('{"type":"object"}') });
  const channelId = await writer.registerChannel({ topic: '/tick', messageEncoding: 'json', schemaId, metadata: new Map() });
  for (let i = 0; i < opts.messages; i++) {
    const t = BigInt(opts.startMs + i * (opts.stepMs ?? 100)) * 1_000_000n;
    await writer.addMessage({ channelId, sequence: i, logTime: t, publishTime: t, data: enc(JSON.stringify({ i, pad: 'x'.repeat(64) })) });
  }
  await writer.end();
  return Buffer.concat(parts);
}

const T0 = Date.parse('2025-06-01T10:00:00Z');
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function folderNames(r: Rig): Promise<string[]> {
  return (await readdir(r.folder)).filter((n) => n !== '.rejected').sort();
}

async function rejected(r: Rig): Promise<Record<string, string>> {
  const dir = join(r.folder, '.rejected');
  const out: Record<string, string> = {};
  for (const n of await readdir(dir).catch(() => [] as string[])) if (n.endsWith('.reason')) out[n.slice(0, -'.reason'.length)] = await readFile(join(dir, n), 'utf8');
  return out;
}

/** Scans until the machine is idle again with every finalization done. */
async function importAll(r: Rig): Promise<void> {
  await r.watcher.scan();
  await r.machine.whenSettled();
}

describe('import recorder: recordings dropped into the folder', () => {
  it('a closed MCAP becomes one finalized, reported episode with the times it holds', async () => {
    const r = await rig();
    const bytes = await mcap({ startMs: T0, messages: 30 });
    await writeFile(join(r.folder, 'run-1.mcap'), bytes);
    // The poll on the injected scheduler: start() scans now and again every poll_ms.
    await r.watcher.start();
    await expect.poll(async () => (await r.store.episodes.list()).length).toBe(1);
    await r.machine.whenSettled();
    const [ep] = await r.store.episodes.list();
    expect(ep!.outcome).toBe('success');
    expect(ep!.interrupted).toBe(false);
    expect(ep!.facts).toMatchObject({ started_at: new Date(T0).toISOString(), ended_at: new Date(T0 + 2900).toISOString(), duration_s: 2.9, message_count: 30 });
    expect(ep!.manifest.files).toEqual([{ path: 'run-1.mcap', size_bytes: bytes.length, sha256: sha256(bytes) }]);
    expect(await readFile(join(r.dataDir, ep!.dir, 'run-1.mcap'))).toEqual(bytes);
    expect((await r.store.outbox.get(episodeReportMsgId(ep!.id)))?.state).toBe('pending');
    expect(await folderNames(r)).toEqual([]);
    expect(await r.store.imports.byEpisode(ep!.id)).toMatchObject({ name: 'run-1.mcap', kind: 'file', sizeAtBegin: bytes.length });
    // Later polls find nothing more to do.
    (r.scheduler as ManualScheduler).advance(500);
    await r.watcher.scan();
    expect(await r.store.episodes.ids()).toEqual([ep!.id]);
    await r.close();
  });

  it('a half-written MCAP records until its writer closes it, then is one episode', async () => {
    const r = await rig();
    const bytes = await mcap({ startMs: T0, messages: 40 });
    const path = join(r.folder, 'live.mcap');
    const cut = Math.floor(bytes.length / 2);
    await writeFile(path, bytes.subarray(0, cut)); // header and the first messages
    await r.watcher.scan();
    expect(r.machine.state).toBe('recording');
    const episodeId = r.machine.status().episode_id!;
    expect(r.watcher.status()).toMatchObject({ importing: 'live.mcap' });
    await r.watcher.scan();
    expect(r.machine.state).toBe('recording');
    expect(await folderNames(r)).toEqual(['live.mcap']);
    await appendFile(path, bytes.subarray(cut, bytes.length - 3)); // all but the last bytes of the magic
    await r.watcher.scan();
    expect(r.machine.state).toBe('recording');
    await appendFile(path, bytes.subarray(bytes.length - 3)); // closed
    await importAll(r);
    expect(r.machine.state).toBe('idle');
    const eps = await r.store.episodes.list();
    expect(eps.map((e) => e.id)).toEqual([episodeId]);
    expect(eps[0]!.facts).toMatchObject({ outcome: 'success', started_at: new Date(T0).toISOString(), message_count: 40 });
    expect(eps[0]!.manifest.files[0]!.sha256).toBe(sha256(bytes));
    await r.close();
  });

  it('corrupt entries are moved to .rejected/ with their reason, never an episode', async () => {
    const r = await rig();
    await writeFile(join(r.folder, 'garbage.mcap'), 'this is not an MCAP file at all');
    const good = await mcap({ startMs: T0, messages: 3 });
    // A closed MCAP whose summary was damaged after the fact.
    const damaged = Buffer.from(good);
    // A byte of the summary section (just before the footer): its CRC no longer matches.
    damaged[damaged.length - 60] = damaged[damaged.length - 60]! ^ 0xff;
    await writeFile(join(r.folder, 'damaged.mcap'), damaged);
    await mkdir(join(r.folder, 'bag'));
    await writeFile(join(r.folder, 'bag', 'bag_0.mcap'), good);
    await writeFile(join(r.folder, 'bag', 'metadata.yaml'), 'rosbag2_bagfile_information: [unclosed\n');
    // A good recording under a name the manifest would leave out.
    await writeFile(join(r.folder, 'run.tmp-1.mcap'), good);
    // First scan: only suspected (a writer may be half way through metadata.yaml).
    await importAll(r);
    expect(await rejected(r)).toEqual({});
    await importAll(r);
    const reasons = await rejected(r);
    expect(Object.keys(reasons).sort()).toEqual(['bag', 'damaged.mcap', 'garbage.mcap', 'run.tmp-1.mcap']);
    expect(reasons['run.tmp-1.mcap']).toContain('.tmp-');
    expect(reasons['garbage.mcap']).toContain('does not start with the MCAP magic');
    expect(reasons['damaged.mcap']).toContain('summary does not read');
    expect(reasons.bag).toContain('metadata.yaml');
    expect(await r.store.episodes.ids()).toEqual([]);
    expect(r.machine.state).toBe('idle');
    expect(r.watcher.status().rejected).toBe(4);
    expect(r.logs.records.filter((l) => l.msg === 'import folder entry rejected').map((l) => l.source).sort()).toEqual(['bag', 'damaged.mcap', 'garbage.mcap', 'run.tmp-1.mcap']);
    // Not retried: the folder is empty now.
    await importAll(r);
    expect(r.watcher.status().rejected).toBe(4);
    await r.close();
  });

  it('the same recording dropped again under another name is skipped as a duplicate', async () => {
    const r = await rig();
    const bytes = await mcap({ startMs: T0, messages: 10 });
    await writeFile(join(r.folder, 'a.mcap'), bytes);
    await importAll(r);
    const [first] = await r.store.episodes.ids();
    await writeFile(join(r.folder, 'copy-of-a.mcap'), bytes);
    // Same size, other bytes: not a duplicate.
    const other = Buffer.from(await mcap({ startMs: T0 + 1, messages: 10 }));
    expect(other.length).toBe(bytes.length);
    await writeFile(join(r.folder, 'b.mcap'), other);
    await importAll(r);
    await importAll(r);
    expect((await rejected(r))['copy-of-a.mcap']).toContain(`duplicate of ${first}`);
    const ids = await r.store.episodes.ids();
    expect(ids).toHaveLength(2);
    expect(await folderNames(r)).toEqual([]);
    await r.close();
  });

  it('a source already imported that shows up again (same name and inode) is rejected, not imported twice', async () => {
    const r = await rig();
    await writeFile(join(r.folder, 'a.mcap'), await mcap({ startMs: T0, messages: 4 }));
    await importAll(r);
    const [ep] = await r.store.episodes.list();
    // The same file (a rename keeps its inode) back in the folder, as a move that failed would leave it.
    await rename(join(r.dataDir, ep!.dir, 'a.mcap'), join(r.folder, 'a.mcap'));
    await importAll(r);
    await importAll(r);
    expect((await rejected(r))['a.mcap']).toContain(`already imported as ${ep!.id}`);
    expect(await r.store.episodes.ids()).toEqual([ep!.id]);
    await r.close();
  });

  it('entries are taken oldest first, one at a time, and dot-names are left alone', async () => {
    const r = await rig();
    await writeFile(join(r.folder, 'first.mcap'), await mcap({ startMs: T0, messages: 2 }));
    await r.watcher.scan();
    await r.machine.whenSettled();
    await writeFile(join(r.folder, '.copying.mcap'), await mcap({ startMs: T0 + 50_000, messages: 2 }));
    await writeFile(join(r.folder, 'second.mcap'), await mcap({ startMs: T0 + 10_000, messages: 2 }));
    await writeFile(join(r.folder, 'notes.txt'), 'not a recording');
    await importAll(r);
    const eps = await r.store.episodes.list();
    expect(eps.map((e) => e.manifest.files[0]!.path)).toEqual(['first.mcap', 'second.mcap']);
    expect(await folderNames(r)).toEqual(['.copying.mcap', 'notes.txt']);
    await r.close();
  });
});

describe('import recorder: a rosbag2 directory written by Python rosbags', () => {
  it('is recording while metadata.yaml is missing and one episode with its metadata times once closed', { timeout: 600_000 }, async () => {
    const python = ensurePythonEnv();
    const r = await rig();
    const bag = join(r.folder, 'rosbag2_2025_06_01-10_00_00');
    const startNs = BigInt(T0) * 1_000_000n;
    execFileSync(python, [
      '-c',
      `
import sys
from rosbags.rosbag2 import Writer, StoragePlugin
from rosbags.typesys import Stores, get_typestore
ts = get_typestore(Stores.ROS2_HUMBLE)
String = ts.types['std_msgs/msg/String']
with Writer(sys.argv[1], version=9, storage_plugin=StoragePlugin.MCAP) as w:
    c = w.add_connection('/chatter', String.__msgtype__, typestore=ts)
    for i in range(25):
        w.write(c, int(sys.argv[2]) + i * 200_000_000, ts.serialize_cdr(String(data=f'hello {i}'), String.__msgtype__))
`,
      bag,
      String(startNs),
    ]);
    // As the bag is while ros2 bag record still writes: no metadata.yaml yet.
    const aside = join(r.dataDir, '..', 'metadata.yaml');
    await rename(join(bag, 'metadata.yaml'), aside);
    await r.watcher.scan();
    expect(r.machine.state).toBe('recording');
    await rename(aside, join(bag, 'metadata.yaml'));
    await importAll(r);
    const eps = await r.store.episodes.list();
    expect(eps).toHaveLength(1);
    const ep = eps[0]!;
    const name = 'rosbag2_2025_06_01-10_00_00';
    expect(ep.manifest.files.map((f) => f.path)).toEqual([`${name}/metadata.yaml`, `${name}/${name}.mcap`]);
    expect(ep.facts).toMatchObject({ outcome: 'success', started_at: new Date(T0).toISOString(), ended_at: new Date(T0 + 24 * 200).toISOString(), message_count: 25 });
    // Read back with rosbags from the episode directory: the bag as it was written.
    const count = execFileSync(python, ['-c', 'import sys\nfrom rosbags.rosbag2 import Reader\nwith Reader(sys.argv[1]) as r: print(sum(1 for _ in r.messages()))', join(r.dataDir, ep.dir, name)], { encoding: 'utf8' });
    expect(count.trim()).toBe('25');
    await r.close();
  });
});

describe('import recorder: crashes and restarts', () => {
  it('kill -9 before the begin committed: the orphan directory goes, the recording is imported once', async () => {
    const first = await rig();
    const bytes = await mcap({ startMs: T0, messages: 5 });
    await writeFile(join(first.folder, 'r.mcap'), bytes);
    // What a kill between the recorder's start and the commit leaves: an episode directory no row knows.
    await mkdir(join(first.dataDir, 'episodes', 'ep_2222222222aaaaaaaaaaaaaaaa'), { recursive: true });
    const second = await rig({ dataDir: first.dataDir, folder: first.folder });
    await importAll(second);
    expect(await readdir(join(second.dataDir, 'episodes'))).toHaveLength(1);
    expect(await second.store.episodes.ids()).toHaveLength(1);
  });

  it('kill -9 while recording: the same episode resumes and is finished once closed', async () => {
    const first = await rig();
    const bytes = await mcap({ startMs: T0, messages: 20 });
    const path = join(first.folder, 'live.mcap');
    await writeFile(path, bytes.subarray(0, 100));
    await first.watcher.scan();
    const episodeId = first.machine.status().episode_id!;
    expect(first.machine.state).toBe('recording');
    // kill -9: nothing is closed.
    const second = await rig({ dataDir: first.dataDir, folder: first.folder });
    expect(second.machine.state).toBe('recording');
    expect(second.machine.status().episode_id).toBe(episodeId);
    await second.watcher.scan();
    expect(second.machine.state).toBe('recording');
    await appendFile(path, bytes.subarray(100));
    await importAll(second);
    const eps = await second.store.episodes.list();
    expect(eps.map((e) => [e.id, e.outcome, e.interrupted])).toEqual([[episodeId, 'success', false]]);
    expect(second.logs.messages()).toContain('resuming the recording the previous process left running');
  });

  for (const moved of [false, true]) {
    it(`kill -9 in finalizing after fail, the source ${moved ? 'already moved' : 'still in the folder'}: one episode, a failure`, async () => {
      const first = await rig({ config: { stop_timeout_ms: 60_000 } });
      const bytes = await mcap({ startMs: T0, messages: 20 });
      await writeFile(join(first.folder, 'live.mcap'), bytes.subarray(0, bytes.length - 10));
      await first.watcher.scan();
      const { episode_id } = await first.machine.fail({ source: 'test' });
      // The recorder now waits (a timer on the manual scheduler) for the source to close; kill -9 here.
      await expect.poll(() => (first.scheduler as ManualScheduler).pending).toBe(1);
      expect(first.machine.state).toBe('finalizing');
      expect((await first.store.recording.get())?.state).toBe('finalizing');
      if (moved) await rename(join(first.folder, 'live.mcap'), join(first.dataDir, 'episodes', episode_id, 'live.mcap'));
      const second = await rig({ dataDir: first.dataDir, folder: first.folder });
      await second.machine.whenSettled();
      await importAll(second);
      const eps = await second.store.episodes.list();
      expect(eps.map((e) => [e.id, e.outcome, e.interrupted])).toEqual([[episode_id, 'failure', true]]);
      expect(eps[0]!.manifest.files.map((f) => [f.path, f.size_bytes])).toEqual([['live.mcap', bytes.length - 10]]);
      expect(await folderNames(second)).toEqual([]);
    });
  }

  it('kill -9 after the episode completed: nothing is imported again', async () => {
    const first = await rig();
    await writeFile(join(first.folder, 'r.mcap'), await mcap({ startMs: T0, messages: 5 }));
    await importAll(first);
    const second = await rig({ dataDir: first.dataDir, folder: first.folder });
    await importAll(second);
    expect(await second.store.episodes.ids()).toHaveLength(1);
  });

  it('a graceful restart mid-write resumes the same episode', async () => {
    const first = await rig();
    const bytes = await mcap({ startMs: T0, messages: 20 });
    const path = join(first.folder, 'live.mcap');
    await writeFile(path, bytes.subarray(0, 200));
    await first.watcher.scan();
    const episodeId = first.machine.status().episode_id!;
    await first.close();
    // The source was let go, not taken.
    expect(await folderNames(first)).toEqual(['live.mcap']);
    await appendFile(path, bytes.subarray(200));
    const second = await rig({ dataDir: first.dataDir, folder: first.folder });
    expect(second.machine.status()).toMatchObject({ state: 'recording', episode_id: episodeId });
    await importAll(second);
    const eps = await second.store.episodes.list();
    expect(eps.map((e) => [e.id, e.outcome, e.interrupted])).toEqual([[episodeId, 'success', false]]);
    expect(eps[0]!.facts.message_count).toBe(20);
    await second.close();
  });
});

describe('import recorder: fail', () => {
  it('while recording: runs the stop program, which closes the recording; the episode is a failure with its own times', async () => {
    const root = await makeTempDir();
    const bytes = await mcap({ startMs: T0, messages: 20 });
    const tail = join(root, 'tail.bin');
    const cut = bytes.length - 30;
    await writeFile(tail, bytes.subarray(cut));
    const folder = join(root, 'import');
    const ran = join(root, 'stop-ran');
    const r = await rig({
      dataDir: join(root, 'data'),
      folder,
      clock: systemClock,
      scheduler: systemScheduler,
      // The robot's stack stand-in: told to stop, it writes the rest of its file.
      config: { poll_ms: 20, stop_timeout_ms: 60_000, stop_shell: `touch "${ran}" && cat "${tail}" >> "${join(folder, 'live.mcap')}"` },
    });
    await writeFile(join(folder, 'live.mcap'), bytes.subarray(0, cut));
    await r.watcher.scan();
    expect(r.machine.state).toBe('recording');
    const ended = await r.machine.fail({ source: 'test' });
    expect(ended).toMatchObject({ outcome: 'failure', recording_state: 'finalizing' });
    await r.machine.whenSettled();
    expect((await stat(ran)).isFile()).toBe(true);
    const [ep] = await r.store.episodes.list();
    expect(ep).toMatchObject({ id: ended.episode_id, outcome: 'failure', interrupted: false });
    expect(ep!.facts).toMatchObject({ started_at: new Date(T0).toISOString(), message_count: 20 });
    expect(ep!.manifest.files[0]!.sha256).toBe(sha256(bytes));
    await r.close();
  });

  it('while recording, when the recording does not close in time: taken as it is', async () => {
    const root = await makeTempDir();
    const bytes = await mcap({ startMs: T0, messages: 20 });
    const ran = join(root, 'stop-ran');
    const r = await rig({ dataDir: join(root, 'data'), folder: join(root, 'import'), clock: systemClock, scheduler: systemScheduler, config: { poll_ms: 20, stop_timeout_ms: 200, stop: ['/usr/bin/touch', ran] } });
    await writeFile(join(r.folder, 'stuck.mcap'), bytes.subarray(0, 300));
    await r.watcher.scan();
    const ended = await r.machine.fail({ source: 'test' });
    await r.machine.whenSettled();
    expect((await stat(ran)).isFile()).toBe(true);
    const [ep] = await r.store.episodes.list();
    expect(ep).toMatchObject({ id: ended.episode_id, outcome: 'failure' });
    expect(ep!.manifest.files.map((f) => [f.path, f.size_bytes])).toEqual([['stuck.mcap', 300]]);
    expect(r.logs.messages()).toContain('the recording did not close in time; taking it as it is');
    await r.close();
  });

  it('while idle: refused, nothing changes', async () => {
    const r = await rig();
    const err = await r.machine.fail({ source: 'test' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IllegalTransitionError);
    expect(r.machine.state).toBe('idle');
    expect(await r.store.recording.get()).toBeUndefined();
    expect(await r.store.episodes.ids()).toEqual([]);
    await r.close();
  });

  it('start is not the agent’s to make: the recorder refuses it and nothing is left behind', async () => {
    const r = await rig();
    await expect(r.machine.start({ source: 'test' })).rejects.toThrow(/cannot start a recording itself/);
    expect(r.machine.state).toBe('idle');
    expect(await readdir(join(r.dataDir, 'episodes'))).toEqual([]);
    await r.close();
  });
});

describe('import recorder: configuration', () => {
  it('refuses a folder on another file system than the data directory', async () => {
    const shm = '/dev/shm';
    const other = await stat(shm).catch(() => undefined);
    const root = await makeTempDir();
    if (!other || other.dev === (await stat(root)).dev) return; // no second file system here
    const folder = join(shm, `fa-import-${process.pid}-${Date.now()}`);
    await mkdir(folder);
    try {
      const cfg = ImportRecorderConfigSchema.parse({ kind: 'import', folder });
      expect(await checkImportRecorderConfig(cfg, { dataDir: join(root, 'data'), env: process.env })).toEqual([expect.stringContaining('is not on the file system of the data directory')]);
      const r = await rig({ dataDir: join(root, 'data'), folder });
      await expect(r.watcher.start()).rejects.toThrow(/not on the file system/);
      await r.close();
    } finally {
      execFileSync('rm', ['-rf', folder]);
    }
  });

  it('config check names a missing folder and a missing stop program; a good config has no problems', async () => {
    const root = await makeTempDir();
    const env = { PATH: '/usr/bin:/bin' };
    const missing = ImportRecorderConfigSchema.parse({ kind: 'import', folder: join(root, 'nope'), stop: ['no-such-stop-program'] });
    expect(await checkImportRecorderConfig(missing, { dataDir: join(root, 'data'), env })).toEqual([
      `recorder.folder: ${join(root, 'nope')} does not exist`,
      'recorder.stop: no-such-stop-program is not an executable program on PATH',
    ]);
    await mkdir(join(root, 'import'));
    const good = ImportRecorderConfigSchema.parse({ kind: 'import', folder: join(root, 'import'), stop: ['touch', 'x'] });
    expect(good).toMatchObject({ poll_ms: 1000, stop_timeout_ms: 30_000 });
    expect(await checkImportRecorderConfig(good, { dataDir: join(root, 'data'), env })).toEqual([]);
    expect(ImportRecorderConfigSchema.safeParse({ kind: 'import', folder: 'relative/path' }).success).toBe(false);
    expect(ImportRecorderConfigSchema.safeParse({ kind: 'import', folder: root, stop: ['a'], stop_shell: 'b' }).success).toBe(false);
    expect(ImportRecorderConfigSchema.safeParse({ kind: 'import', folder: root, unknown: 1 }).success).toBe(false);
  });
});
