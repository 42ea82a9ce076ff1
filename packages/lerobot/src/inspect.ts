import { readFile, readdir, stat } from 'node:fs/promises';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { McapIndexedReader } from '@mcap/core';
import {
  headerStampNs,
  isImageSchema,
  isRecordingError,
  openMcap,
  timestampNs,
  type ByteSource,
  type DecodedMessage,
  type McapRecording,
} from '@fleet/recordings';
import { fileSource } from '@fleet/recordings/node';
import { parse as parseYaml } from 'yaml';
import { proposeMapping } from './inspect-mapping.js';
import { describeImage, looksLikeImage, numericFields, type InspectedField, type InspectedImage, type InspectedTopic } from './inspect-messages.js';
import type { MappingInput } from './source/mapping.js';

/**
 * `fleet datasets inspect-recording`: what a recording holds, told from its summary and the first
 * few messages of each topic, and the mapping the export would need for it. The work is bounded
 * whatever the file's size: the summary (statistics, chunk indexes) gives counts, span and
 * compression; per topic, at most HEADER_SAMPLES messages from its first chunk and its last
 * message (one chunk from the end) are decoded, so a 1 GB bag costs a few chunks per topic.
 */

/** Messages per topic whose `header.stamp` is compared with their log time. */
export const HEADER_SAMPLES = 5;

export const INSPECT_ERROR_CODES = {
  /** The path does not exist or cannot be read. */
  not_found: 'the path does not exist',
  /** The file does not start with MCAP's magic bytes. */
  not_mcap: 'the file is not an MCAP recording',
  /** The file starts as an MCAP but has no summary (its writer was killed): it cannot be read without its index. */
  no_summary: 'the MCAP has no summary',
  /** A directory with neither a metadata.yaml nor any .mcap file. */
  no_recording: 'the directory holds no recording',
  /** The MCAP's index or chunks cannot be read. */
  unreadable: 'the recording cannot be read',
} as const;
export type InspectErrorCode = keyof typeof INSPECT_ERROR_CODES;

export type { InspectedField, InspectedImage, InspectedTopic };

export class InspectError extends Error {
  override readonly name = 'InspectError';
  constructor(
    readonly code: InspectErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface InspectedFile {
  /** Relative to the bag directory (or the file's own name). */
  path: string;
  size_bytes: number;
  /** The MCAP header's profile (`ros2`, `protobuf`, '') and writer library. */
  profile?: string;
  library?: string;
  chunks?: number;
  /** Chunk compressions in use ('' is uncompressed). */
  compression?: string[];
  message_count?: number;
  /** Why the file could not be read (the others still are). */
  error?: { code: InspectErrorCode; message: string };
}

export interface InspectedRecording {
  path: string;
  format: 'mcap' | 'rosbag2';
  files: InspectedFile[];
  size_bytes: number;
  /** Log times (ns, decimal strings: they exceed a double's integers) and the same as ISO 8601. */
  start_ns: string | null;
  end_ns: string | null;
  start: string | null;
  end: string | null;
  duration_s: number | null;
  message_count: number;
  compression: string[];
  /** What the reader noticed on the way (a missing metadata.yaml, an unreadable file). */
  notes: string[];
}


export interface RecordingInspection {
  recording: InspectedRecording;
  topics: InspectedTopic[];
  /** What `export-lerobot --mapping` would take for this recording; null when nothing maps. */
  mapping: MappingInput | null;
}

const MCAP_MAGIC = Uint8Array.from([0x89, 0x4d, 0x43, 0x41, 0x50, 0x30, 0x0d, 0x0a]);

export interface InspectOptions {
  /** How a file's bytes are read (default: the file itself); tests count what is read through it. */
  openFile?: (path: string) => Promise<ByteSource & { close(): Promise<void> }>;
}

/** An .mcap file, or a rosbag2 directory (its files in the order metadata.yaml lists them). */
export async function inspectRecording(path: string, opts: InspectOptions = {}): Promise<RecordingInspection> {
  let st;
  try {
    st = await stat(path);
  } catch (err) {
    throw new InspectError('not_found', `${path}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file or directory' : messageOf(err)}`, { cause: err });
  }
  const notes: string[] = [];
  const files = st.isDirectory() ? await bagFiles(path, notes) : [resolve(path)];
  const base = st.isDirectory() ? resolve(path) : dirname(resolve(path));
  const inspected: InspectedFile[] = [];
  const opened: { file: InspectedFile; recording: McapRecording }[] = [];
  let firstError: InspectError | undefined;
  try {
    for (const f of files) {
      const file: InspectedFile = { path: relative(base, f), size_bytes: 0 };
      inspected.push(file);
      try {
        const r = await openFile(f, file, opts.openFile ?? fileSource);
        opened.push({ file, recording: r.recording });
      } catch (err) {
        if (!(err instanceof InspectError)) throw err;
        firstError ??= err;
        file.error = { code: err.code, message: err.message };
        notes.push(`${file.path}: ${err.message}`);
      }
    }
    // One file alone that cannot be read is the answer; in a bag of several, the others still tell.
    if (opened.length === 0) throw firstError ?? new InspectError('no_recording', `${path}: no MCAP file to read`);
    const topics = await inspectTopics(opened.map((o) => o.recording));
    const { mapping, notes: topicNotes } = proposeMapping(topics);
    for (const t of topics) {
      const n = topicNotes.get(t.topic);
      if (n !== undefined) {
        if (n.mappedAs !== undefined) t.mapped_as = n.mappedAs;
        if (n.note !== undefined) t.note = n.note;
      }
    }
    return { recording: recordingFacts(path, st.isDirectory(), inspected, opened.map((o) => o.recording), notes), topics, mapping };
  } finally {
    for (const o of opened) await o.recording.close();
  }
}

/** The .mcap files of a rosbag2 directory: metadata.yaml's `relative_file_paths`, else every .mcap by name. */
async function bagFiles(dir: string, notes: string[]): Promise<string[]> {
  const root = resolve(dir);
  let text: string | undefined;
  try {
    text = await readFile(join(root, 'metadata.yaml'), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new InspectError('not_found', `${join(dir, 'metadata.yaml')}: ${messageOf(err)}`, { cause: err });
  }
  if (text !== undefined) {
    let listed: unknown;
    try {
      listed = (parseYaml(text) as { rosbag2_bagfile_information?: { relative_file_paths?: unknown } } | null)?.rosbag2_bagfile_information?.relative_file_paths;
    } catch (err) {
      notes.push(`metadata.yaml does not parse (${messageOf(err).split('\n')[0]}): its .mcap files are read by name`);
    }
    if (Array.isArray(listed) && listed.length > 0 && listed.every((p) => typeof p === 'string')) {
      const out: string[] = [];
      for (const p of listed) {
        const abs = resolve(root, p);
        // metadata.yaml comes with the recording: it does not get to point outside the bag.
        if (!abs.startsWith(root + sep)) notes.push(`metadata.yaml lists ${p}, outside the bag directory: not read`);
        else out.push(abs);
      }
      if (out.length > 0) return out;
    } else if (listed !== undefined) notes.push('metadata.yaml has no relative_file_paths list: its .mcap files are read by name');
  } else {
    notes.push('no metadata.yaml (the recorder did not close the bag?): its .mcap files are read by name');
  }
  const names = (await readdir(root)).filter((n) => n.endsWith('.mcap')).sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  if (names.length === 0) throw new InspectError('no_recording', `${dir}: a directory with neither a rosbag2 metadata.yaml nor an .mcap file`);
  return names.map((n) => join(root, n));
}

async function openFile(path: string, file: InspectedFile, open: NonNullable<InspectOptions['openFile']>): Promise<{ recording: McapRecording }> {
  let source;
  try {
    source = await open(path);
  } catch (err) {
    throw new InspectError('not_found', `${path}: ${messageOf(err)}`, { cause: err });
  }
  try {
    const size = BigInt(source.size);
    file.size_bytes = Number(size);
    const head = size >= 8n ? await source.read(0n, 8n) : new Uint8Array(0);
    if (!MCAP_MAGIC.every((b, i) => head[i] === b)) throw new InspectError('not_mcap', `${path}: not an MCAP file (it does not start with MCAP's magic bytes)`);
    const tail = size >= 16n ? await source.read(size - 8n, 8n) : new Uint8Array(0);
    if (!MCAP_MAGIC.every((b, i) => tail[i] === b)) {
      throw new InspectError('no_summary', `${path}: the MCAP ends without its summary and footer (the recorder was stopped before it closed the file), so it cannot be read by its index; \`mcap recover ${basename(path)} -o recovered.mcap\` rebuilds one`);
    }
    // The summary alone, for what @fleet/recordings does not expose: chunk compression, header.
    let summary: McapIndexedReader;
    try {
      summary = await McapIndexedReader.Initialize({ readable: { size: async () => size, read: (o, l) => source.read(o, l) } });
    } catch (err) {
      const m = messageOf(err);
      throw new InspectError(/summary|index/i.test(m) ? 'no_summary' : 'unreadable', `${path}: ${m}`, { cause: err });
    }
    file.profile = summary.header.profile;
    file.library = summary.header.library;
    file.chunks = summary.chunkIndexes.length;
    file.compression = [...new Set(summary.chunkIndexes.map((c) => c.compression || 'none'))].sort();
    file.message_count = Number(summary.statistics?.messageCount ?? 0n);
    try {
      return { recording: await openMcap(source, { name: path }) };
    } catch (err) {
      throw new InspectError('unreadable', `${path}: ${messageOf(err).replace(/^[a-z_]+: /, '')}`, { cause: err });
    }
  } catch (err) {
    await source.close();
    throw err;
  }
}

function isoOf(ns: bigint): string {
  return new Date(Number(ns / 1_000_000n)).toISOString();
}

function recordingFacts(path: string, isDir: boolean, files: InspectedFile[], recordings: McapRecording[], notes: string[]): InspectedRecording {
  const starts = recordings.flatMap((r) => (r.startNs !== undefined ? [r.startNs] : []));
  const ends = recordings.flatMap((r) => (r.endNs !== undefined ? [r.endNs] : []));
  const start = starts.length > 0 ? starts.reduce((a, b) => (b < a ? b : a)) : undefined;
  const end = ends.length > 0 ? ends.reduce((a, b) => (b > a ? b : a)) : undefined;
  return {
    path,
    format: isDir ? 'rosbag2' : 'mcap',
    files,
    size_bytes: files.reduce((s, f) => s + f.size_bytes, 0),
    start_ns: start?.toString() ?? null,
    end_ns: end?.toString() ?? null,
    start: start !== undefined ? isoOf(start) : null,
    end: end !== undefined ? isoOf(end) : null,
    duration_s: start !== undefined && end !== undefined ? Number(end - start) / 1e9 : null,
    message_count: files.reduce((s, f) => s + (f.message_count ?? 0), 0),
    compression: [...new Set(files.flatMap((f) => f.compression ?? []))].sort(),
    notes,
  };
}

/** Every topic of the files, by name; counts summed, the first message from the first file that has the topic, the last from the last. */
async function inspectTopics(recordings: McapRecording[]): Promise<InspectedTopic[]> {
  const byTopic = new Map<string, { recordings: McapRecording[]; count: number }>();
  const topics: InspectedTopic[] = [];
  for (const r of recordings) {
    for (const c of r.channels) {
      let agg = byTopic.get(c.topic);
      if (agg === undefined) {
        agg = { recordings: [], count: 0 };
        byTopic.set(c.topic, agg);
        topics.push({
          topic: c.topic,
          type: c.schemaName,
          message_encoding: c.messageEncoding,
          schema_encoding: c.schemaEncoding,
          message_count: 0,
          rate_hz: null,
          first_ns: null,
          last_ns: null,
          stamp: null,
          stamp_offset_ms: null,
          fields: [],
          image: null,
          mapped_as: null,
          note: null,
          error: null,
        });
      }
      const n = Number(c.messageCount ?? 0n);
      agg.count += n;
      if (n > 0 || c.messageCount === undefined) agg.recordings.push(r);
    }
  }
  topics.sort((a, b) => a.topic.localeCompare(b.topic));
  for (const t of topics) {
    const agg = byTopic.get(t.topic)!;
    t.message_count = agg.count;
    try {
      await inspectTopic(t, agg.recordings);
    } catch (err) {
      if (!isRecordingError(err) && !(err instanceof InspectError)) throw err;
      // A schema that does not parse or a message that does not decode fails this topic only.
      t.error = { code: err.code, message: messageOf(err).replace(/^[a-z_]+: /, '') };
    }
  }
  return topics;
}

async function inspectTopic(t: InspectedTopic, recordings: McapRecording[]): Promise<void> {
  const first = recordings[0];
  const lastRec = recordings.at(-1);
  if (first === undefined || lastRec === undefined) return;
  const samples: DecodedMessage[] = [];
  const it = first.messages([t.topic]);
  try {
    for (let r = await it.next(); r.done !== true && samples.length < HEADER_SAMPLES; r = await it.next()) samples.push(r.value);
  } finally {
    await it.return();
  }
  const head = samples[0];
  if (head === undefined) return;
  const last = (await lastRec.first(t.topic, true)) ?? samples.at(-1)!;
  t.first_ns = head.logTimeNs.toString();
  t.last_ns = last.logTimeNs.toString();
  const span = Number(last.logTimeNs - head.logTimeNs) / 1e9;
  t.rate_hz = t.message_count > 1 && span > 0 ? round((t.message_count - 1) / span, 3) : null;

  const hasHeader = headerStampNs(head.data) !== undefined;
  const stampOf = (d: unknown) => (hasHeader ? headerStampNs(d) : timestampNs(d));
  if (hasHeader || timestampNs(head.data) !== undefined) {
    t.stamp = hasHeader ? 'header.stamp' : 'timestamp';
    const offsets = samples.flatMap((m) => {
      const s = stampOf(m.data);
      return s !== undefined ? [Number(s - m.logTimeNs) / 1e6] : [];
    });
    t.stamp_offset_ms = offsets.length > 0 ? round(median(offsets), 3) : null;
  }
  if (isImageSchema(t.type) || looksLikeImage(head.data)) t.image = await describeImage(t.type, head.data, `${t.topic} at ${head.logTimeNs} ns`);
  else t.fields = numericFields(head.data);
}

function round(v: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
