/**
 * What the `import` recorder (import-recorder.ts) knows about one entry of its folder: whether
 * its writer has closed it, the times and message count it holds, and a digest of its bytes for
 * telling a copy dropped again. Read-only: nothing here moves or changes a file.
 *
 * An entry is a `*.mcap` file or a directory (what `ros2 bag record --storage mcap` writes: MCAP
 * files and, once it closes them, `metadata.yaml`).
 * - An MCAP is closed when it ends with a Footer record and the magic (`\x89MCAP0\r\n` at both
 *   ends): the footer is the last thing a writer writes. Its summary, when indexed, is read with
 *   @mcap/core's indexed reader; a summary that does not read (bad CRC, ...) is corrupt, since
 *   the writer has finished with it.
 * - A directory is closed when its `metadata.yaml` exists and parses, every file it lists exists,
 *   and every MCAP in it (listed or not: a split may have opened the next one) is closed.
 */
import { createHash } from 'node:crypto';
import { open, readdir, readFile, stat } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { McapIndexedReader } from '@mcap/core';
import { parse as parseYaml } from 'yaml';
import type { EpisodeManifest } from '../rules/episode-facts.js';
import { sha256File } from './finalize.js';

export type SourceKind = 'file' | 'directory';

export interface SourceEntry {
  /** Its name in the folder. */
  name: string;
  kind: SourceKind;
}

/** What an entry looks like now. `signature` changes whenever any of its files does. */
export type Inspection =
  | { state: 'open' | 'closed'; ino: number; sizeBytes: number; mtimeMs: number; signature: string }
  | { state: 'corrupt'; reason: string; ino: number; sizeBytes: number; mtimeMs: number; signature: string }
  | { state: 'gone' };

/** The times and message count a closed recording holds (what could be read of them). */
export interface RecordingTimes {
  startedAt?: number;
  endedAt?: number;
  messageCount: number | null;
}

const MAGIC = Buffer.from([0x89, 0x4d, 0x43, 0x41, 0x50, 0x30, 0x0d, 0x0a]);
/** Footer record (opcode 0x02, length 20: summary start, summary offset start, summary CRC) + magic. */
const FOOTER_BYTES = 1 + 8 + 20 + MAGIC.length;
const METADATA = 'metadata.yaml';

/** The folder's candidate entries: `*.mcap` files and directories, never a name starting with `.`. */
export async function listEntries(folder: string): Promise<SourceEntry[]> {
  const out: SourceEntry[] = [];
  for (const d of await readdir(folder, { withFileTypes: true })) {
    if (d.name.startsWith('.')) continue;
    if (d.isDirectory()) out.push({ name: d.name, kind: 'directory' });
    else if (d.isFile() && d.name.endsWith('.mcap')) out.push({ name: d.name, kind: 'file' });
  }
  return out;
}

interface FileStat {
  rel: string;
  size: number;
  mtimeMs: number;
}

/** Every regular file under `dir`, relative and `/`-separated, in path order. */
async function filesUnder(dir: string): Promise<FileStat[]> {
  const out: FileStat[] = [];
  for (const d of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!d.isFile()) continue;
    const abs = join(d.parentPath, d.name);
    const s = await stat(abs);
    out.push({ rel: relative(dir, abs).split(sep).join('/'), size: s.size, mtimeMs: s.mtimeMs });
  }
  return out.sort((a, b) => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));
}

const missing = (err: unknown): boolean => (err as NodeJS.ErrnoException).code === 'ENOENT';

export async function inspectEntry(folder: string, entry: SourceEntry): Promise<Inspection> {
  const path = join(folder, entry.name);
  try {
    const s = await stat(path);
    if (entry.kind === 'file') {
      if (!s.isFile()) return { state: 'gone' };
      const base = { ino: s.ino, sizeBytes: s.size, mtimeMs: s.mtimeMs, signature: `${s.ino}:${s.size}:${s.mtimeMs}` };
      const m = await mcapState(path);
      return m.state === 'corrupt' ? { ...base, state: 'corrupt', reason: m.reason } : { ...base, state: m.state };
    }
    if (!s.isDirectory()) return { state: 'gone' };
    const files = await filesUnder(path);
    const base = {
      ino: s.ino,
      sizeBytes: files.reduce((n, f) => n + f.size, 0),
      mtimeMs: Math.max(s.mtimeMs, ...files.map((f) => f.mtimeMs)),
      signature: `${s.ino}|${files.map((f) => `${f.rel}:${f.size}:${f.mtimeMs}`).join('|')}`,
    };
    const d = await directoryState(path, files);
    return d.state === 'corrupt' ? { ...base, state: 'corrupt', reason: d.reason } : { ...base, state: d.state };
  } catch (err) {
    if (missing(err)) return { state: 'gone' };
    throw err;
  }
}

type McapState = { state: 'open' } | { state: 'closed'; times: RecordingTimes } | { state: 'corrupt'; reason: string };

/** Whether the MCAP at `path` is closed, and what its summary says. */
export async function mcapState(path: string): Promise<McapState> {
  const fh = await open(path, 'r');
  try {
    const size = (await fh.stat()).size;
    const head = Buffer.alloc(Math.min(size, MAGIC.length));
    await fh.read(head, 0, head.length, 0);
    // A file shorter than the magic may be a writer's first bytes.
    if (!MAGIC.subarray(0, head.length).equals(head)) return { state: 'corrupt', reason: 'it does not start with the MCAP magic' };
    if (size < MAGIC.length * 2 + FOOTER_BYTES) return { state: 'open' };
    const tail = Buffer.alloc(FOOTER_BYTES);
    await fh.read(tail, 0, FOOTER_BYTES, size - FOOTER_BYTES);
    if (!tail.subarray(FOOTER_BYTES - MAGIC.length).equals(MAGIC) || tail[0] !== 0x02 || tail.readBigUInt64LE(1) !== 20n) return { state: 'open' };
    const summaryStart = tail.readBigUInt64LE(9);
    if (summaryStart === 0n) return { state: 'closed', times: { messageCount: null } };
    try {
      const reader = await McapIndexedReader.Initialize({
        readable: {
          size: async () => BigInt(size),
          read: async (offset, length) => {
            const buf = Buffer.alloc(Number(length));
            const { bytesRead } = await fh.read(buf, 0, buf.length, Number(offset));
            if (bytesRead !== buf.length) throw new Error(`short read at ${offset}`);
            return buf;
          },
        },
      });
      return { state: 'closed', times: summaryTimes(reader) };
    } catch (err) {
      return { state: 'corrupt', reason: `its summary does not read: ${(err as Error).message}` };
    }
  } finally {
    await fh.close();
  }
}

const NS_PER_MS = 1_000_000n;

function summaryTimes(reader: McapIndexedReader): RecordingTimes {
  const st = reader.statistics;
  if (st && st.messageCount > 0n) {
    return { startedAt: Number(st.messageStartTime / NS_PER_MS), endedAt: Number(st.messageEndTime / NS_PER_MS), messageCount: Number(st.messageCount) };
  }
  if (st) return { messageCount: 0 };
  // No statistics record: the chunk indexes still bound the messages' times.
  const chunks = reader.chunkIndexes;
  if (chunks.length === 0) return { messageCount: null };
  let start = chunks[0]!.messageStartTime;
  let end = chunks[0]!.messageEndTime;
  for (const c of chunks) {
    if (c.messageStartTime < start) start = c.messageStartTime;
    if (c.messageEndTime > end) end = c.messageEndTime;
  }
  return { startedAt: Number(start / NS_PER_MS), endedAt: Number(end / NS_PER_MS), messageCount: null };
}

interface BagMetadata {
  files: string[];
  times: RecordingTimes;
}

/** rosbag2's `metadata.yaml` (`rosbag2_bagfile_information`): the files it lists and its times. */
export function parseBagMetadata(text: string): BagMetadata {
  const doc = parseYaml(text) as unknown;
  const info = (doc as { rosbag2_bagfile_information?: unknown } | null)?.rosbag2_bagfile_information;
  if (typeof info !== 'object' || info === null) throw new Error('no rosbag2_bagfile_information');
  const i = info as Record<string, unknown>;
  const paths = i.relative_file_paths;
  if (!Array.isArray(paths) || !paths.every((p): p is string => typeof p === 'string' && p.length > 0)) throw new Error('relative_file_paths is not a list of file names');
  for (const p of paths) {
    if (p.startsWith('/') || p.split(/[\\/]/).includes('..')) throw new Error(`relative_file_paths names ${JSON.stringify(p)}, outside the bag`);
  }
  const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
  const startNs = num((i.starting_time as Record<string, unknown> | undefined)?.nanoseconds_since_epoch);
  const durationNs = num((i.duration as Record<string, unknown> | undefined)?.nanoseconds);
  const count = num(i.message_count);
  const times: RecordingTimes = { messageCount: count ?? null };
  if (startNs !== undefined && count !== 0) {
    times.startedAt = Math.floor(startNs / 1e6);
    if (durationNs !== undefined) times.endedAt = Math.floor((startNs + durationNs) / 1e6);
  }
  return { files: paths, times };
}

type DirectoryState = { state: 'open' } | { state: 'closed'; times: RecordingTimes } | { state: 'corrupt'; reason: string };

async function directoryState(dir: string, files: readonly FileStat[]): Promise<DirectoryState> {
  const mcaps = files.filter((f) => f.rel.endsWith('.mcap'));
  const states = new Map<string, McapState>();
  for (const f of mcaps) {
    const m = await mcapState(join(dir, ...f.rel.split('/')));
    if (m.state === 'corrupt') return { state: 'corrupt', reason: `${f.rel}: ${m.reason}` };
    states.set(f.rel, m);
  }
  if (!files.some((f) => f.rel === METADATA)) return { state: 'open' };
  let meta: BagMetadata;
  try {
    meta = parseBagMetadata(await readFile(join(dir, METADATA), 'utf8'));
  } catch (err) {
    return { state: 'corrupt', reason: `${METADATA}: ${(err as Error).message}` };
  }
  const present = new Set(files.map((f) => f.rel));
  for (const p of meta.files) {
    if (!present.has(p)) return { state: 'corrupt', reason: `${METADATA} lists ${p}, which is not in the directory` };
  }
  // A split may have opened the next file before the metadata names it.
  if ([...states.values()].some((m) => m.state === 'open')) return { state: 'open' };
  return { state: 'closed', times: meta.times };
}

/**
 * The times and message count the recording at `path` holds: an MCAP's statistics (or chunk
 * indexes); a bag's `metadata.yaml`, else its MCAPs' statistics together; else the files' own
 * times (the oldest birth or change time, the newest modification).
 */
export async function recordingTimes(path: string, kind: SourceKind): Promise<RecordingTimes> {
  let times: RecordingTimes = { messageCount: null };
  const files = kind === 'file' ? [{ abs: path, rel: '' }] : (await filesUnder(path)).map((f) => ({ abs: join(path, ...f.rel.split('/')), rel: f.rel }));
  if (kind === 'directory' && files.some((f) => f.rel === METADATA)) {
    try {
      times = parseBagMetadata(await readFile(join(path, METADATA), 'utf8')).times;
    } catch {
      // Taken as it was (a failed recording): the MCAPs may still say.
    }
  }
  if (times.startedAt === undefined) {
    const parts: RecordingTimes[] = [];
    for (const f of files.filter((x) => kind === 'file' || x.rel.endsWith('.mcap'))) {
      const m = await mcapState(f.abs).catch(() => undefined);
      if (m?.state === 'closed') parts.push(m.times);
    }
    const starts = parts.flatMap((p) => (p.startedAt === undefined ? [] : [p.startedAt]));
    const ends = parts.flatMap((p) => (p.endedAt === undefined ? [] : [p.endedAt]));
    const counts = parts.map((p) => p.messageCount);
    if (starts.length > 0) times = { ...times, startedAt: Math.min(...starts), endedAt: Math.max(...ends, ...starts) };
    if (times.messageCount === null && counts.length > 0 && counts.every((c) => c !== null)) times.messageCount = counts.reduce((a, b) => a + b, 0);
  }
  if (times.startedAt === undefined && files.length > 0) {
    const stats = await Promise.all(files.map((f) => stat(f.abs)));
    const born = stats.map((s) => (s.birthtimeMs > 0 ? s.birthtimeMs : s.ctimeMs));
    times = { ...times, startedAt: Math.floor(Math.min(...born)), endedAt: Math.floor(Math.max(...stats.map((s) => s.mtimeMs))) };
  }
  return times;
}

/**
 * A digest of the recording's bytes that does not depend on its name: a file's sha256, or for a
 * directory the sha256 of its `path sha256` lines (paths relative to it, in order). Files whose
 * name holds `.tmp-` are left out, as the manifest leaves them out.
 */
export async function contentDigest(path: string, kind: SourceKind): Promise<string> {
  if (kind === 'file') return sha256File(path);
  const lines: string[] = [];
  for (const f of await filesUnder(path)) {
    if (f.rel.includes('.tmp-')) continue;
    lines.push(`${f.rel} ${await sha256File(join(path, ...f.rel.split('/')))}\n`);
  }
  return createHash('sha256').update(lines.join('')).digest('hex');
}

/** The same digest of an imported recording, from its episode's manifest; undefined when absent. */
export function digestFromManifest(manifest: EpisodeManifest, name: string, kind: SourceKind): string | undefined {
  if (kind === 'file') return manifest.files.find((f) => f.path === name)?.sha256;
  const prefix = `${name}/`;
  const lines = manifest.files.filter((f) => f.path.startsWith(prefix)).map((f) => `${f.path.slice(prefix.length)} ${f.sha256}\n`);
  return lines.length === 0 ? undefined : createHash('sha256').update(lines.join('')).digest('hex');
}
