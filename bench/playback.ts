/**
 * `npm run bench -- playback [--sizes 100,1000] [--runs 3] [--width 640] [--height 480] [--fps 30]`:
 * the console's player on big recordings, read straight from the bucket.
 *
 * For each size (MB), a rosbag2 bag as `ros2 bag record --storage mcap` leaves it (the
 * simulator's writer, simulator/src/recording/ros2-bag.ts: cdr, ros2msg schemas, zstd chunks of
 * 768 KiB as rosbag2_storage_mcap's default), with a camera of `--width`x`--height` JPEG frames
 * (sensor_msgs/msg/CompressedImage) at `--fps` and joint states at 100 Hz, as long as it takes to
 * reach the size. It is imported by a real agent (the `import` recorder), uploaded through the
 * reference grant provider's grants and verified: a verified episode's file in the S3 server,
 * through the playback stack of the browser tests (console/test/playback-harness.ts). Then,
 * `--runs` times each, in a fresh signed-in chromium tab:
 * - first frame: from the navigation to the episode page (performance.now() in the page, whose
 *   origin is the navigation's start) to the moment the player's canvas has `data-frame-log-time`;
 *   the frame drawn must be the bag's first camera frame;
 * - the tab's memory then and after a seek: CDP `Performance.getMetrics` JSHeapUsedSize (the
 *   page's V8 heap), `Memory.getDOMCounters` nodes, and the RSS of the tab's renderer process
 *   (/proc: the largest renderer of this benchmark's chromium, one tab open);
 * - a seek to the middle (the seek bar set to half the duration): bytes the store sent (its
 *   request log) until the frame at the middle is drawn, and once the page has settled (nothing
 *   more asked for a second), against the file's size; and the time to that frame.
 * Baselines in the same run: the same first frame read in Node with @fleet/recordings from the
 * file on disk (open by the index, first camera message, JPEG decoded with sharp), the same tab's
 * memory on the episode list (no recording open), and the file's size. Targets, printed, never asserted:
 * first frame < 1 s both ways; the tab's memory < 250 MB for the 1 GB recording.
 * Writes the figures into /work/notes/bench-playback.md when that directory exists, else only
 * prints them.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir, open, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import sharp from 'sharp';
import type { CDPSession, Page } from 'playwright-core';
import { cameraImage, openMcap } from '@fleet/recordings';
import { fileSource } from '@fleet/recordings/node';
import { startPlaybackHarness, type PlaybackEpisode, type PlaybackHarness } from '../console/test/playback-harness.js';
import { Rosbag2Writer } from '../simulator/src/recording/ros2-bag.js';
import { COMPRESSED_IMAGE_TYPE, JOINT_STATE_TYPE, ros2Time } from '../simulator/src/recording/ros2-signals.js';
import { parseBenchArgs, type BenchModule } from './lib/args.js';
import { fmt, table } from './lib/measure.js';
import { BenchFailure, row, type SummaryRow } from './lib/summary.js';

const CAMERA_TOPIC = '/camera/front/image_raw/compressed';
const JOINTS_TOPIC = '/joint_states';
const JOINTS = ['shoulder_pan', 'shoulder_lift', 'elbow', 'wrist_1', 'wrist_2', 'wrist_3', 'gripper'];
const JOINT_HZ = 100;
/** rosbag2_storage_mcap's default chunk size. */
const CHUNK_BYTES = 768 * 1024;
/** Distinct JPEG frames, encoded once and cycled (3 s at 30 fps): writing stays fast, each frame still its own. */
const DISTINCT_FRAMES = 90;
const JPEG_QUALITY = 80;
const MB = 1_000_000;
const MIB = 1024 * 1024;
const NOTES = '/work/notes';
const NOTES_FILE = join(NOTES, 'bench-playback.md');
/** The first frame's target (both ways) and the tab's memory target for the 1 GB recording. */
const FIRST_FRAME_TARGET_MS = 1000;
const MEMORY_TARGET_MB = 250;

const log = (line: string) => process.stderr.write(`${line}\n`);
/** With FLEET_BENCH_TRACE set, each step of a tab's measure (where a run that hangs stopped). */
const trace = (what: string) => process.env.FLEET_BENCH_TRACE && log(`playback:   ${new Date().toISOString()} ${what}`);

interface Sizes {
  sizesMb: number[];
  runs: number;
  width: number;
  height: number;
  fps: number;
}

function intOf(raw: string | boolean | undefined, name: string, fallback: number, min: number, max: number): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be an integer in ${min}..${max}, got ${String(raw)}`);
  return n;
}

function sizesOf(extra: Record<string, string | boolean | undefined>): Sizes {
  const raw = typeof extra.sizes === 'string' ? extra.sizes : '100,1000';
  const sizesMb = raw.split(',').map((s) => intOf(s.trim(), 'sizes', 0, 1, 4000));
  return {
    sizesMb,
    runs: intOf(extra.runs, 'runs', 3, 1, 20),
    width: intOf(extra.width, 'width', 640, 16, 1920),
    height: intOf(extra.height, 'height', 480, 16, 1920),
    fps: intOf(extra.fps, 'fps', 30, 1, 120),
  };
}

/** The scene of frame `i`: a gradient, a moving square and fixed-seed noise (a camera's JPEG is not all smooth). */
async function encodeFrames(width: number, height: number): Promise<Buffer[]> {
  const frames: Buffer[] = [];
  let seed = 12345;
  const noise = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 24) - 128;
  for (let i = 0; i < DISTINCT_FRAMES; i++) {
    const rgb = Buffer.alloc(width * height * 3);
    const sx = Math.round(((Math.sin((2 * Math.PI * i) / DISTINCT_FRAMES) + 1) / 2) * (width * 0.7));
    const sy = Math.round(height * 0.4);
    for (let y = 0; y < height; y++) {
      for (let x = 0; x < width; x++) {
        const o = (y * width + x) * 3;
        const inSquare = x >= sx && x < sx + width * 0.2 && y >= sy && y < sy + height * 0.25;
        const n = noise() >> 3;
        rgb[o] = inSquare ? 220 : Math.max(0, Math.min(255, ((x * 255) / width + n) | 0));
        rgb[o + 1] = inSquare ? 40 : Math.max(0, Math.min(255, ((y * 255) / height + n) | 0));
        rgb[o + 2] = inSquare ? 40 : Math.max(0, Math.min(255, (128 + ((i * 3) % 100) + n) | 0));
      }
    }
    frames.push(await sharp(rgb, { raw: { width, height, channels: 3 } }).jpeg({ quality: JPEG_QUALITY }).toBuffer());
  }
  return frames;
}

interface Bag {
  dir: string;
  frames: number;
  seconds: number;
  bytes: number;
  firstFrameNs: bigint;
  writeS: number;
}

/**
 * A rosbag2 directory `<dir>` of about `targetBytes`, written in `<parent>/.<name>` and renamed
 * into place when complete (the import recorder ignores `.`-names: the documented way in).
 */
async function writeBag(parent: string, name: string, targetBytes: number, startMs: number, frames: readonly Buffer[], s: Sizes): Promise<Bag> {
  const t0 = performance.now();
  const hidden = join(parent, `.${name}`);
  await mkdir(hidden, { recursive: true });
  const fh = await open(join(hidden, 'bag_0.mcap'), 'w');
  const writer = new Rosbag2Writer(hidden, fh, CHUNK_BYTES);
  let frameCount = 0;
  let lastMs = startMs;
  try {
    await writer.begin(
      [
        { name: CAMERA_TOPIC, type: COMPRESSED_IMAGE_TYPE },
        { name: JOINTS_TOPIC, type: JOINT_STATE_TYPE },
      ],
      'fleet bench playback',
    );
    let joint = 0;
    // Messages in time order: each frame, then the joint states up to the next frame.
    while (writer.bytes < targetBytes) {
      const frameMs = startMs + Math.round((frameCount * 1000) / s.fps);
      while (startMs + (joint * 1000) / JOINT_HZ <= frameMs) {
        const ms = startMs + Math.round((joint * 1000) / JOINT_HZ);
        const phase = (2 * Math.PI * joint) / (JOINT_HZ * 4);
        await writer.write(JOINTS_TOPIC, joint, ms, {
          header: { stamp: ros2Time(ms), frame_id: 'base_link' },
          name: JOINTS,
          position: JOINTS.map((_, k) => Math.sin(phase + k)),
          velocity: JOINTS.map((_, k) => Math.cos(phase + k)),
          effort: JOINTS.map(() => 0),
        });
        joint++;
      }
      await writer.write(CAMERA_TOPIC, frameCount, frameMs, { header: { stamp: ros2Time(frameMs), frame_id: 'camera_front' }, format: 'jpeg', data: frames[frameCount % frames.length]! });
      lastMs = frameMs;
      frameCount++;
    }
    await writer.end();
  } finally {
    await fh.close();
  }
  const dir = join(parent, name);
  await rename(hidden, dir);
  return { dir, frames: frameCount, seconds: (lastMs - startMs) / 1000, bytes: writer.bytes, firstFrameNs: BigInt(startMs) * 1_000_000n, writeS: (performance.now() - t0) / 1000 };
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** Node's baseline: open the file by its index, read the first camera message and decode its JPEG; with `atNs`, the first at or after it. */
async function nodeFrame(path: string, atNs?: bigint): Promise<{ ms: number; logTimeNs: bigint; bytesRead: number }> {
  const t0 = performance.now();
  const file = await fileSource(path);
  let bytesRead = 0;
  const counted = { size: file.size, read: async (offset: bigint, length: bigint) => ((bytesRead += Number(length)), file.read(offset, length)) };
  try {
    await using rec = await openMcap(counted, { name: path });
    const channel = rec.channels.find((c) => c.topic === CAMERA_TOPIC);
    if (!channel) throw new BenchFailure(`${path}: no ${CAMERA_TOPIC}`);
    for await (const m of rec.messages([CAMERA_TOPIC], atNs !== undefined ? { startNs: atNs } : {})) {
      const image = cameraImage(channel.schemaName, m.data, CAMERA_TOPIC);
      if (image.kind !== 'compressed') throw new BenchFailure(`${path}: expected JPEG frames`);
      await sharp(image.data).raw().toBuffer();
      return { ms: performance.now() - t0, logTimeNs: m.logTimeNs, bytesRead };
    }
    throw new BenchFailure(`${path}: no camera message`);
  } finally {
    await file.close();
  }
}

/**
 * The tab's renderer process: the largest renderer (by RSS) of this benchmark's chromium
 * (descendants of this process, through chromium's zygote, with `--type=renderer`), less the
 * browser UI's `--top-chrome-webui` one. With one tab open the others are a spare renderer or
 * none: the largest holds the page. Chromium rewrites its children's command lines into one
 * space-separated string, hence the split on both.
 */
function tabRendererPid(): number {
  const procs: { pid: number; ppid: number; args: string[] }[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      procs.push({ pid: Number(name), ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]), args: readFileSync(`/proc/${name}/cmdline`, 'utf8').split(/[\0 ]/) });
    } catch {
      // gone meanwhile
    }
  }
  const mine = new Set([process.pid]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of procs) {
      if (mine.has(p.pid) || !mine.has(p.ppid)) continue;
      mine.add(p.pid);
      grew = true;
    }
  }
  let largestKb = 0;
  let pid = 0;
  for (const p of procs) {
    if (!mine.has(p.pid) || !p.args.includes('--type=renderer') || p.args.includes('--top-chrome-webui') || p.args.includes('--extension-process')) continue;
    try {
      const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${p.pid}/status`, 'utf8'))?.[1] ?? 0);
      if (kb > largestKb) [largestKb, pid] = [kb, p.pid];
    } catch {
      // gone meanwhile
    }
  }
  if (pid === 0) throw new BenchFailure("found no renderer process of this benchmark's chromium in /proc");
  return pid;
}

/**
 * A renderer's memory, MiB, three ways:
 * - `rss`: VmRSS, every resident page it maps, its share of chromium's binary, shared libraries,
 *   fonts and the V8 snapshot included (a renderer holding an empty page is about 110 MiB here);
 * - `footprint`: RssAnon + VmSwap, what Chrome itself counts as a process's private memory
 *   footprint on Linux (its task manager's "Memory footprint" column): the memory the tab alone
 *   costs, without the file-backed pages all renderers share;
 * - `pss`: Pss of /proc/<pid>/smaps_rollup, resident pages each divided by the number of
 *   processes sharing them.
 */
interface ProcMemory {
  pid: number;
  rss: number;
  footprint: number;
  pss: number;
}

function procMemory(pid: number): ProcMemory {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (text: string, name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? Number.NaN);
  let pss = Number.NaN;
  try {
    pss = kb(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'), 'Pss') / 1024;
  } catch {
    // not readable on this kernel
  }
  return { pid, rss: kb(status, 'VmRSS') / 1024, footprint: (kb(status, 'RssAnon') + (kb(status, 'VmSwap') || 0)) / 1024, pss };
}

interface TabMemory {
  /** CDP `Performance.getMetrics` JSHeapUsedSize: the page's V8 heap, objects only. */
  heapMb: number;
  /** CDP `Runtime.getHeapUsage` backingStorageSize: ArrayBuffers' and external strings' bytes (outside the V8 heap). */
  backingMb: number;
  rendererMb: number;
  renderer: ProcMemory;
  domNodes: number;
}

export async function tabMemory(cdp: CDPSession): Promise<TabMemory> {
  const { metrics } = await cdp.send('Performance.getMetrics');
  const heap = metrics.find((m) => m.name === 'JSHeapUsedSize')?.value ?? Number.NaN;
  let backing = Number.NaN;
  try {
    backing = (await cdp.send('Runtime.getHeapUsage')).backingStorageSize ?? Number.NaN;
  } catch {
    // an older chromium
  }
  let domNodes = Number.NaN;
  try {
    domNodes = (await cdp.send('Memory.getDOMCounters')).nodes;
  } catch {
    // not in this chromium
  }
  const renderer = procMemory(tabRendererPid());
  return { heapMb: heap / MIB, backingMb: backing / MIB, rendererMb: renderer.rss, renderer, domNodes };
}

/**
 * Chrome's own account of the tab's renderer (a memory-infra dump, as chrome://tracing's
 * memory view shows it): its private footprint and each allocator's size, MiB. PartitionAlloc's
 * partitions (`malloc` is one, `array_buffer` holds ArrayBuffers' bytes) also give the bytes
 * allocated in them: size less allocated is free memory the allocator keeps committed.
 */
interface AllocatorDump {
  footprintMb: number;
  /** Top-level allocators (malloc, partition_alloc, v8, blink_gc, cc, skia, …) above 0.5 MiB. */
  allocators: { name: string; mb: number }[];
  partitions: { name: string; mb: number; allocatedMb: number }[];
}

interface TraceEvent {
  ph: string;
  pid: number;
  id?: string;
  args?: { dumps?: { process_totals?: Record<string, string>; allocators?: Record<string, { attrs?: Record<string, { value?: string }> }> } };
}

export async function allocatorDump(cdp: CDPSession, pid: number): Promise<AllocatorDump | undefined> {
  const events: TraceEvent[] = [];
  let guid = '';
  const onData = (e: { value: unknown[] }) => events.push(...(e.value as TraceEvent[]));
  cdp.on('Tracing.dataCollected', onData);
  try {
    const complete = new Promise<void>((resolve) => cdp.once('Tracing.tracingComplete', () => resolve()));
    await cdp.send('Tracing.start', { traceConfig: { includedCategories: ['disabled-by-default-memory-infra'], excludedCategories: ['*'] }, transferMode: 'ReportEvents' });
    const dumped = await cdp.send('Tracing.requestMemoryDump', { deterministic: false, levelOfDetail: 'detailed' });
    await cdp.send('Tracing.end');
    await complete;
    if (!dumped.success) return undefined;
    guid = dumped.dumpGuid;
  } catch {
    // no memory-infra in this chromium
    return undefined;
  } finally {
    cdp.off('Tracing.dataCollected', onData);
  }
  // The tab's renderer's dump: the one asked for when it is there, else the newest (starting
  // the trace takes one too, moments before).
  const ofPid = events.filter((e) => e.ph === 'v' && e.pid === pid && e.args?.dumps);
  const ids = [...new Set(ofPid.map((e) => e.id ?? ''))];
  const id = ids.includes(guid) ? guid : ids.sort((x, y) => Number.parseInt(y, 16) - Number.parseInt(x, 16))[0];
  const mine = ofPid.filter((e) => (e.id ?? '') === id);
  const hexMb = (v: string | undefined) => (v === undefined ? 0 : Number.parseInt(v, 16) / MIB);
  const totals = mine.map((e) => e.args!.dumps!.process_totals).find((t) => t !== undefined);
  const allocs = Object.assign({}, ...mine.map((e) => e.args!.dumps!.allocators ?? {})) as Record<string, { attrs?: Record<string, { value?: string }> }>;
  const size = (name: string) => hexMb(allocs[name]?.attrs?.size?.value);
  return {
    footprintMb: hexMb(totals?.private_footprint_bytes),
    allocators: Object.keys(allocs)
      .filter((k) => !k.includes('/'))
      .map((name) => ({ name, mb: size(name) }))
      .filter((a) => a.mb >= 0.5)
      .sort((x, y) => y.mb - x.mb),
    partitions: Object.keys(allocs)
      .filter((k) => /^(malloc|partition_alloc\/partitions)\/[^/]+$/.test(k) && k !== 'malloc/allocated_objects' && k !== 'malloc/partitions')
      .concat(Object.keys(allocs).filter((k) => /^malloc\/partitions\/[^/]+$/.test(k)))
      .map((name) => ({ name, mb: size(name), allocatedMb: hexMb(allocs[name]?.attrs?.allocated_objects_size?.value) }))
      .filter((p) => p.mb >= 0.5)
      .sort((x, y) => y.mb - x.mb),
  };
}

/** What the page holds after a full garbage collection (taken last: collecting changes what follows). */
interface Breakdown {
  /** The tab's memory once garbage is collected. */
  afterGc: TabMemory;
  /** ArrayBuffers' bytes (the heap snapshot's `system / JSArrayBufferData`) but the wasm memories', by size. */
  buffers: { count: number; mb: number; bySize: { bucket: string; count: number; mb: number }[]; largestKb: number[] };
  /** WebAssembly memories (the zstd and lz4 decompressors' heaps). */
  wasm: { count: number; mb: number[] };
  /** The V8 heap's largest kinds by self size (type and constructor). */
  heapTop: { kind: string; count: number; mb: number }[];
  canvases: { count: number; mb: number };
}

const SIZE_BUCKETS: readonly [string, number, number][] = [
  ['< 64 KiB', 0, 64 * 1024],
  ['64-256 KiB', 64 * 1024, 256 * 1024],
  ['256 KiB exactly', 256 * 1024, 256 * 1024 + 1],
  ['256 KiB-1 MiB', 256 * 1024 + 1, MIB],
  ['1-4 MiB', MIB, 4 * MIB],
  ['>= 4 MiB', 4 * MIB, Number.POSITIVE_INFINITY],
];

interface HeapSnapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

/** ArrayBuffers by size and the heap's largest kinds, from a heap snapshot (which collects garbage first). */
function snapshotFigures(snap: HeapSnapshot): { sizes: number[]; heapTop: Breakdown['heapTop'] } {
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const nf = fields.length;
  const [iType, iName, iSize] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [number, number, number];
  const sizes: number[] = [];
  const kinds = new Map<string, { count: number; bytes: number }>();
  for (let i = 0; i < snap.nodes.length; i += nf) {
    const type = types[snap.nodes[i + iType]!]!;
    const name = snap.strings[snap.nodes[i + iName]!]!;
    const size = snap.nodes[i + iSize]!;
    if (type === 'native' && name === 'system / JSArrayBufferData') {
      sizes.push(size);
      continue;
    }
    const kind = type === 'string' || type === 'concatenated string' || type === 'sliced string' ? 'string' : `${type} ${name.slice(0, 60)}`;
    const a = kinds.get(kind) ?? { count: 0, bytes: 0 };
    a.count++;
    a.bytes += size;
    kinds.set(kind, a);
  }
  return {
    sizes,
    heapTop: [...kinds]
      .sort((x, y) => y[1].bytes - x[1].bytes)
      .slice(0, 8)
      .map(([kind, a]) => ({ kind, count: a.count, mb: a.bytes / MIB })),
  };
}

/** ArrayBuffers by size, less one of each wasm memory's size (a memory whose buffer JS holds is in the snapshot's ArrayBuffers too). */
function buffersOf(sizes: readonly number[], wasmBytes: readonly number[]): Breakdown['buffers'] {
  const rest = [...sizes].sort((x, y) => y - x);
  for (const w of wasmBytes) {
    const i = rest.indexOf(w);
    if (i >= 0) rest.splice(i, 1);
  }
  const bySize = SIZE_BUCKETS.map(([bucket, lo, hi]) => {
    const inIt = rest.filter((n) => n >= lo && n < hi);
    return { bucket, count: inIt.length, mb: inIt.reduce((n, x) => n + x, 0) / MIB };
  });
  return { count: rest.length, mb: rest.reduce((n, x) => n + x, 0) / MIB, bySize, largestKb: rest.slice(0, 12).map((n) => Math.round(n / 1024)) };
}

export async function breakdown(cdp: CDPSession, page: Page): Promise<Breakdown> {
  const chunks: string[] = [];
  const onChunk = (e: { chunk: string }) => chunks.push(e.chunk);
  cdp.on('HeapProfiler.addHeapSnapshotChunk', onChunk);
  let afterGc: TabMemory;
  try {
    trace('collectGarbage');
    await cdp.send('HeapProfiler.collectGarbage');
    // Before the snapshot, which costs memory of its own.
    afterGc = await tabMemory(cdp);
    trace('takeHeapSnapshot');
    await cdp.send('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
    trace(`heap snapshot: ${chunks.length} chunks`);
  } finally {
    cdp.off('HeapProfiler.addHeapSnapshotChunk', onChunk);
  }
  const figures = snapshotFigures(JSON.parse(chunks.join('')) as HeapSnapshot);
  trace('wasm memories and canvases');
  // A string (Node's types have no DOM): the probe's memories, the canvases' pixels.
  const got = await page.evaluate<Pick<Breakdown, 'wasm' | 'canvases'>>(`(() => {
    const memories = globalThis.__fleetBench?.memories ?? [];
    const canvases = [...document.querySelectorAll('canvas')];
    return {
      wasm: { count: memories.length, mb: memories.map((m) => m.buffer.byteLength / ${MIB}) },
      canvases: { count: canvases.length, mb: canvases.reduce((n, c) => n + (c.width * c.height * 4) / ${MIB}, 0) },
    };
  })()`);
  return { buffers: buffersOf(figures.sizes, got.wasm.mb.map((m) => Math.round(m * MIB))), heapTop: figures.heapTop, ...got, afterGc };
}

/**
 * Records, in the page, every value a canvas's `data-frame-log-time` takes and when
 * (performance.now(): ms since the navigation started), the newest 1,000.
 */
const FRAME_PROBE = `(() => {
  const probe = { changes: [], memories: [] };
  globalThis.__fleetBench = probe;
  // The WebAssembly memories the page's modules export (the decompressors' heaps), kept to be measured.
  const keep = (result) => {
    const instance = result instanceof WebAssembly.Instance ? result : result.instance;
    for (const v of Object.values(instance.exports)) if (v instanceof WebAssembly.Memory) probe.memories.push(v);
    return result;
  };
  const instantiate = WebAssembly.instantiate;
  WebAssembly.instantiate = (...args) => instantiate.apply(WebAssembly, args).then(keep);
  const streaming = WebAssembly.instantiateStreaming;
  if (streaming) WebAssembly.instantiateStreaming = (...args) => streaming.apply(WebAssembly, args).then(keep);
  let last = null;
  const check = () => {
    const c = document.querySelector('canvas[data-frame-log-time]');
    const v = c ? c.getAttribute('data-frame-log-time') : null;
    if (v === null || v === last) return;
    last = v;
    probe.changes.push({ t: performance.now(), v });
    if (probe.changes.length > 1000) probe.changes.shift();
  };
  new MutationObserver(check).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-frame-log-time'] });
})();`;

interface FrameChange {
  t: number;
  v: string;
}

const frameChanges = (page: Page): Promise<FrameChange[]> => page.evaluate(() => (globalThis as unknown as { __fleetBench: { changes: FrameChange[] } }).__fleetBench.changes);
const pageNow = (page: Page): Promise<number> => page.evaluate(() => performance.now());

/** The first frame change after `afterMs` whose log time is within [lo, hi]. */
async function waitForFrame(page: Page, afterMs: number, lo: bigint, hi: bigint, timeoutMs: number): Promise<FrameChange> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const hit = (await frameChanges(page)).find((c) => c.t >= afterMs && BigInt(c.v) >= lo && BigInt(c.v) <= hi);
    if (hit) return hit;
    if (Date.now() > deadline) throw new BenchFailure(`no frame between ${lo} and ${hi} ns drawn within ${timeoutMs} ms (frames: ${JSON.stringify((await frameChanges(page)).slice(-5))})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface Phases {
  /** The read-links request started (the console loaded, signed in from the tab's session, and fetched the episode). */
  readLinksStartMs: number;
  /** The read-links answer was in. */
  readLinksMs: number;
  /** The first range GET to the bucket started. */
  firstRangeMs: number;
  /** The last range GET that ended before the frame was drawn. */
  lastRangeMs: number;
  /** Range GETs before the frame. */
  ranges: number;
}

/** The page's resource timing up to `untilMs`: read-links and the bucket's GETs (only times and counts leave the page, never a URL). */
function phasesOf(page: Page, bucketOrigin: string, untilMs: number): Promise<Phases> {
  return page.evaluate(
    ([origin, until]) => {
      // Node's types name the entries' fields the browser's have; this runs in the page.
      const entries = performance.getEntriesByType('resource') as unknown as { name: string; startTime: number; responseEnd: number }[];
      const links = entries.filter((e) => new URL(e.name).pathname.endsWith('/read-links') && e.responseEnd <= until);
      const bucket = entries.filter((e) => new URL(e.name).origin === origin && e.responseEnd <= until);
      return {
        readLinksStartMs: links.length > 0 ? Math.min(...links.map((e) => e.startTime)) : Number.NaN,
        readLinksMs: links.length > 0 ? Math.min(...links.map((e) => e.responseEnd)) : Number.NaN,
        firstRangeMs: bucket.length > 0 ? Math.min(...bucket.map((e) => e.startTime)) : Number.NaN,
        lastRangeMs: bucket.length > 0 ? Math.max(...bucket.map((e) => e.responseEnd)) : Number.NaN,
        ranges: bucket.length,
      };
    },
    [bucketOrigin, untilMs] as const,
  );
}

interface Run {
  firstFrameMs: number;
  firstFrameNs: bigint;
  firstFrameBytes: number;
  /** Where the first frame's time went (ms since the navigation started, from the page's resource timing). */
  phases: Phases;
  atFirstFrame: TabMemory;
  seekMs: number;
  seekBytesToFrame: number;
  seekBytesSettled: number;
  afterSeek: TabMemory;
  /** After the seek, once garbage is collected: what is live, by kind. */
  held: Breakdown;
  /** After the seek, Chrome's memory-infra account of the renderer (undefined when it gave none). */
  allocators: AllocatorDump | undefined;
  /** The same tab on the episode list (no recording open). */
  list: TabMemory;
}

const sumBytes = (rs: readonly { method: string; bytes: number }[]) => rs.filter((r) => r.method === 'GET').reduce((n, r) => n + r.bytes, 0);

/** Polls the store's log until nothing new came for `quietMs` (bounded): what the page asked for after all. */
async function settledBytes(h: PlaybackHarness, quietMs: number, maxMs: number): Promise<number> {
  const deadline = Date.now() + maxMs;
  let count = -1;
  let since = Date.now();
  for (;;) {
    const rs = await h.s3Requests();
    if (rs.length !== count) {
      count = rs.length;
      since = Date.now();
    } else if (Date.now() - since >= quietMs || Date.now() > deadline) {
      return sumBytes(rs);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function measureTab(h: PlaybackHarness, ep: PlaybackEpisode, bag: Bag, fps: number): Promise<Run> {
  trace('h.signedInPage');
  const { page } = await h.signedInPage();
  try {
    trace('page.context');
    const cdp = await page.context().newCDPSession(page);
    trace('cdp.send');
    await cdp.send('Performance.enable');
    // The baseline heap: the same console, on the episode list (no recording open).
    trace('page.goto');
    await page.goto(`${h.baseUrl}/console/episodes`);
    trace('page.getByRole');
    await page.getByRole('heading', { level: 1 }).first().waitFor();
    trace('tabMemory');
    const list = await tabMemory(cdp);

    trace('page.addInitScript');
    await page.addInitScript(FRAME_PROBE);
    trace('h.clearS3Requests');
    await h.clearS3Requests();
    trace('page.goto');
    await page.goto(h.episodeUrl(ep.id));
    trace('waitForFrame');
    const first = await waitForFrame(page, 0, 0n, BigInt('18446744073709551615'), 120_000);
    const firstFrameNs = BigInt(first.v);
    if (firstFrameNs !== bag.firstFrameNs) throw new BenchFailure(`the player drew the frame at ${firstFrameNs} ns first, not the bag's first (${bag.firstFrameNs} ns)`);
    const firstFrameBytes = sumBytes(await h.s3Requests());
    trace('phasesOf');
    const phases = await phasesOf(page, h.bucketOrigin, first.t);
    trace('tabMemory');
    const atFirstFrame = await tabMemory(cdp);

    // A seek to the middle with the seek bar; the frame drawn is the newest at or before it.
    const seek = page.getByLabel('Seek', { exact: true });
    const maxMs = Number(await seek.getAttribute('max'));
    const midMs = Math.round(maxMs / 2);
    const targetNs = bag.firstFrameNs + BigInt(midMs) * 1_000_000n;
    const frameNs = BigInt(Math.ceil(1e9 / fps));
    trace('h.clearS3Requests');
    await h.clearS3Requests();
    trace('pageNow');
    const t0 = await pageNow(page);
    trace('seek.fill');
    await seek.fill(String(midMs));
    trace('waitForFrame');
    const drawn = await waitForFrame(page, t0, targetNs - 2n * frameNs, targetNs, 120_000);
    const seekMs = drawn.t - t0;
    const seekBytesToFrame = sumBytes(await h.s3Requests());
    trace('settledBytes');
    const seekBytesSettled = await settledBytes(h, 1000, 15_000);
    trace('tabMemory');
    const afterSeek = await tabMemory(cdp);
    trace('allocatorDump');
    const allocators = await allocatorDump(cdp, afterSeek.renderer.pid);
    trace('breakdown');
    const held = await breakdown(cdp, page);
    trace('cdp.detach');
    await cdp.detach();
    return { firstFrameMs: first.t, firstFrameNs, firstFrameBytes, phases, atFirstFrame, seekMs, seekBytesToFrame, seekBytesSettled, afterSeek, held, allocators, list };
  } finally {
    trace('page.close');
    await page.close();
  }
}

interface SizeResult {
  sizeMb: number;
  bag: Bag;
  importS: number;
  runs: Run[];
  node: { ms: number[]; seekBytes: number };
}

function report(results: readonly SizeResult[], s: Sizes): { text: string; rows: SummaryRow[] } {
  const rows: SummaryRow[] = [];
  const lines: string[] = [];
  const t = table(
    [
      'file',
      'duration',
      'first frame (console)',
      'first frame (Node)',
      'bytes to first frame',
      'JS heap at first frame / after seek',
      'tab renderer RSS: episode list / first frame / after seek',
      'seek to middle',
      'bytes for the seek (to frame / settled)',
    ],
    results.map((r) => {
      const ff = median(r.runs.map((x) => x.firstFrameMs));
      return [
        `${fmt(r.bag.bytes / MB, 0)} MB`,
        `${fmt(r.bag.seconds, 0)} s, ${r.bag.frames} frames`,
        `${fmt(ff, 0)} ms`,
        `${fmt(median(r.node.ms), 0)} ms`,
        `${fmt(median(r.runs.map((x) => x.firstFrameBytes)) / MIB, 2)} MiB`,
        `${fmt(median(r.runs.map((x) => x.atFirstFrame.heapMb)), 1)} / ${fmt(median(r.runs.map((x) => x.afterSeek.heapMb)), 1)} MiB`,
        `${fmt(median(r.runs.map((x) => x.list.rendererMb)), 0)} / ${fmt(median(r.runs.map((x) => x.atFirstFrame.rendererMb)), 0)} / ${fmt(median(r.runs.map((x) => x.afterSeek.rendererMb)), 0)} MiB`,
        `${fmt(median(r.runs.map((x) => x.seekMs)), 0)} ms`,
        `${fmt(median(r.runs.map((x) => x.seekBytesToFrame)) / MIB, 2)} / ${fmt(median(r.runs.map((x) => x.seekBytesSettled)) / MIB, 2)} MiB (${fmt((100 * median(r.runs.map((x) => x.seekBytesSettled))) / r.bag.bytes, 2)} % of the file)`,
      ];
    }),
  );
  const m3 = (xs: readonly TabMemory[]) => `${fmt(median(xs.map((x) => x.renderer.rss)), 0)} / ${fmt(median(xs.map((x) => x.renderer.footprint)), 0)} / ${fmt(median(xs.map((x) => x.renderer.pss)), 0)}`;
  const memoryTable = table(
    ['file', 'episode list', 'first frame', 'after seek', 'after seek, garbage collected', 'JS heap / ArrayBuffers after seek', 'the same, garbage collected'],
    results.map((r) => [
      `${fmt(r.bag.bytes / MB, 0)} MB`,
      m3(r.runs.map((x) => x.list)),
      m3(r.runs.map((x) => x.atFirstFrame)),
      m3(r.runs.map((x) => x.afterSeek)),
      m3(r.runs.map((x) => x.held.afterGc)),
      `${fmt(median(r.runs.map((x) => x.afterSeek.heapMb)), 1)} / ${fmt(median(r.runs.map((x) => x.afterSeek.backingMb)), 1)} MiB`,
      `${fmt(median(r.runs.map((x) => x.held.afterGc.heapMb)), 1)} / ${fmt(median(r.runs.map((x) => x.held.afterGc.backingMb)), 1)} MiB`,
    ]),
  );
  lines.push(
    `playback: ${s.runs} run(s) per size, each in a fresh tab; camera ${s.width}x${s.height} JPEG at ${s.fps} fps + JointState at ${JOINT_HZ} Hz, zstd chunks of ${CHUNK_BYTES / 1024} KiB; medians`,
    t,
    '',
    "the tab's renderer, MiB: RSS / private memory footprint (RssAnon + VmSwap, Chrome's task manager's figure) / PSS",
    memoryTable,
    '',
  );
  for (const r of results) {
    // The run whose after-seek footprint is the median: its live objects, by kind.
    const byFootprint = [...r.runs].sort((a, b) => a.afterSeek.renderer.footprint - b.afterSeek.renderer.footprint);
    const mid = byFootprint[(byFootprint.length - 1) >> 1]!;
    const h = mid.held;
    lines.push(
      `${fmt(r.bag.bytes / MB, 0)} MB, live after the seek (garbage collected): ${h.buffers.count} ArrayBuffers' data ${fmt(h.buffers.mb, 1)} MiB (` +
        h.buffers.bySize.filter((b) => b.count > 0).map((b) => `${b.bucket}: ${b.count}, ${fmt(b.mb, 1)} MiB`).join('; ') +
        `; largest ${h.buffers.largestKb.join(', ')} KiB), ${h.wasm.count} wasm memories of ${h.wasm.mb.map((x) => fmt(x, 1)).join(' + ')} MiB, ` +
        `${h.canvases.count} canvases ${fmt(h.canvases.mb, 1)} MiB of pixels; the V8 heap's largest: ${h.heapTop.map((k) => `${k.kind} ×${k.count} ${fmt(k.mb, 1)} MiB`).join(', ')}`,
    );
    const a = mid.allocators;
    if (a) {
      lines.push(
        `${fmt(r.bag.bytes / MB, 0)} MB, Chrome's memory-infra account of that renderer after the seek (before collecting): private footprint ${fmt(a.footprintMb, 0)} MiB; ` +
          a.allocators.map((x) => `${x.name} ${fmt(x.mb, 1)}`).join(', ') +
          ' MiB; PartitionAlloc partitions (committed / allocated in them): ' +
          a.partitions.map((p) => `${p.name} ${fmt(p.mb, 1)} / ${fmt(p.allocatedMb, 1)}`).join(', ') +
          ' MiB',
      );
    }
  }
  for (const r of results) {
    const label = r.bag.bytes >= 1e9 * 0.95 ? `${fmt(r.bag.bytes / 1e9, 1)} GB` : `${fmt(r.bag.bytes / MB, 0)} MB`;
    const ff = median(r.runs.map((x) => x.firstFrameMs));
    const nodeMs = median(r.node.ms);
    const heapAfter = median(r.runs.map((x) => x.afterSeek.heapMb));
    const listHeap = median(r.runs.map((x) => x.list.heapMb));
    const listRss = median(r.runs.map((x) => x.list.rendererMb));
    const seekBytes = median(r.runs.map((x) => x.seekBytesSettled));
    const rss = median(r.runs.map((x) => x.afterSeek.rendererMb));
    const footprint = median(r.runs.map((x) => x.afterSeek.renderer.footprint));
    const listFootprint = median(r.runs.map((x) => x.list.renderer.footprint));
    const ph = (k: keyof Phases) => median(r.runs.map((x) => x.phases[k]));
    lines.push(
      `${label}: first frame ${fmt(ff, 0)} ms after the navigation: read links asked at ${fmt(ph('readLinksStartMs'), 0)} ms, answered at ${fmt(ph('readLinksMs'), 0)} ms, ` +
        `${fmt(ph('ranges'), 0)} range GETs to the bucket from ${fmt(ph('firstRangeMs'), 0)} to ${fmt(ph('lastRangeMs'), 0)} ms, then decoding and drawing`,
    );
    lines.push(
      `${label}: first frame ${fmt(ff, 0)} ms in the console vs ${fmt(nodeMs, 0)} ms in Node from disk (target < ${FIRST_FRAME_TARGET_MS} ms both: ${ff < FIRST_FRAME_TARGET_MS && nodeMs < FIRST_FRAME_TARGET_MS ? 'met' : 'NOT met'}); ` +
        `the tab's renderer ${fmt(rss, 0)} MiB RSS after the seek, ${fmt(rss - listRss, 0)} MiB more than on the episode list (${fmt(listRss, 0)} MiB)` +
        (r.bag.bytes >= 0.95e9 ? ` (target < ${MEMORY_TARGET_MB} MB: ${rss * 1.048576 < MEMORY_TARGET_MB ? 'met' : 'NOT met'}; the player's share ${(rss - listRss) * 1.048576 < MEMORY_TARGET_MB ? 'meets it' : 'does not'})` : '') +
        `; its private memory footprint ${fmt(footprint, 0)} MiB, ${fmt(footprint - listFootprint, 0)} MiB more than on the list (${fmt(listFootprint, 0)} MiB)` +
        (r.bag.bytes >= 0.95e9 ? ` (target < ${MEMORY_TARGET_MB} MB: ${footprint * 1.048576 < MEMORY_TARGET_MB ? 'met' : 'NOT met'})` : '') +
        `, JS heap ${fmt(heapAfter, 1)} MiB (list: ${fmt(listHeap, 1)} MiB; ArrayBuffers, wasm memory and bitmaps are outside it)` +
        `; a seek to the middle read ${fmt(seekBytes / MIB, 2)} MiB of ${fmt(r.bag.bytes / MIB, 0)} MiB (Node's reader: ${fmt(r.node.seekBytes / MIB, 2)} MiB for the same frame)`,
    );
    rows.push(
      row({
        name: `playback ${label}: first frame drawn in the console, from navigation`,
        figure: ff,
        unit: 'ms',
        baseline: nodeMs,
        baselineUnit: 'ms',
        baselineName: 'the same frame read and decoded in Node from the file on disk',
        target: `< ${FIRST_FRAME_TARGET_MS} ms`,
      }),
      row({
        name: `playback ${label}: the tab's renderer RSS after a seek to the middle`,
        figure: rss,
        unit: 'MiB',
        baseline: listRss,
        baselineUnit: 'MiB',
        baselineName: 'the same tab on the episode list',
        ...(r.bag.bytes >= 0.95e9 ? { target: `< ${MEMORY_TARGET_MB} MB` } : {}),
        note: `JS heap ${fmt(heapAfter, 1)} MiB (list ${fmt(listHeap, 1)} MiB)`,
      }),
      row({
        name: `playback ${label}: the tab's private memory footprint after a seek to the middle`,
        figure: footprint,
        unit: 'MiB',
        baseline: listFootprint,
        baselineUnit: 'MiB',
        baselineName: 'the same tab on the episode list',
        ...(r.bag.bytes >= 0.95e9 ? { target: `< ${MEMORY_TARGET_MB} MB` } : {}),
        note: "RssAnon + VmSwap of the renderer, as Chrome's task manager counts it",
      }),
      row({
        name: `playback ${label}: bytes read from the store for a seek to the middle`,
        figure: seekBytes / MIB,
        unit: 'MiB',
        baseline: r.bag.bytes / MIB,
        baselineUnit: 'MiB',
        baselineName: 'the file',
      }),
    );
  }
  return { text: lines.join('\n'), rows };
}

export const playback: BenchModule = {
  description: "the console's player on 100 MB and 1 GB ROS 2 MCAPs from the bucket: first frame, tab memory, bytes read for a seek, vs Node reading the file",
  async run(argv) {
    const args = parseBenchArgs(argv, { sizes: { type: 'string' }, runs: { type: 'string' }, width: { type: 'string' }, height: { type: 'string' }, fps: { type: 'string' } });
    const s = sizesOf(args.extra);
    if (!existsSync(join(process.cwd(), 'console', 'dist', 'index.html'))) throw new BenchFailure('console/dist is missing: npm run build');
    log(`playback: encoding ${DISTINCT_FRAMES} JPEG frames of ${s.width}x${s.height}`);
    const frames = await encodeFrames(s.width, s.height);
    const avg = frames.reduce((n, f) => n + f.length, 0) / frames.length;
    log(`playback: ${fmt(avg / 1024, 1)} KiB a frame on average; starting the stack (S3 server, cloud, provider, importing agent, chromium)`);
    await using h = await startPlaybackHarness({ robots: 0 });
    // Only the measuring tab is open: the largest renderer is its.
    await h.page.close();
    const results: SizeResult[] = [];
    for (const [i, sizeMb] of s.sizesMb.entries()) {
      const name = `playback-${sizeMb}mb`;
      // Recorded hours ago, the bigger later, so no episode ends in the future.
      const startMs = Date.now() - (s.sizesMb.length - i) * 3 * 3600_000;
      let bag: Bag | undefined;
      const t0 = performance.now();
      const ep = await h.addImportedEpisode(
        async (folder) => {
          log(`playback: writing ${name} (about ${sizeMb} MB)`);
          bag = await writeBag(folder, name, sizeMb * MB, startMs, frames, s);
          log(`playback: ${name}: ${fmt(bag.bytes / MB, 1)} MB, ${bag.frames} frames, ${fmt(bag.seconds, 0)} s, written in ${fmt(bag.writeS, 1)} s; importing, uploading, verifying`);
        },
        { task: name, timeoutMs: 30 * 60_000 },
      );
      const importS = (performance.now() - t0) / 1000 - bag!.writeS;
      log(`playback: ${name} verified as ${ep.id} (${fmt(importS, 0)} s after it was written)`);
      const file = h.episodeFile(ep.id);
      const node = { ms: [] as number[], seekBytes: 0 };
      for (let r = 0; r < s.runs; r++) {
        const got = await nodeFrame(file);
        if (got.logTimeNs !== bag!.firstFrameNs) throw new BenchFailure(`Node read the first frame at ${got.logTimeNs}, expected ${bag!.firstFrameNs}`);
        node.ms.push(got.ms);
      }
      node.seekBytes = (await nodeFrame(file, bag!.firstFrameNs + BigInt(Math.round((bag!.seconds * 1000) / 2)) * 1_000_000n)).bytesRead;
      const runs: Run[] = [];
      for (let r = 0; r < s.runs; r++) {
        const run = await measureTab(h, ep, bag!, s.fps);
        log(
          `playback: ${name} run ${r + 1}: first frame ${fmt(run.firstFrameMs, 0)} ms (read links at ${fmt(run.phases.readLinksMs, 0)} ms, ` +
            `${run.phases.ranges} range GETs from ${fmt(run.phases.firstRangeMs, 0)} to ${fmt(run.phases.lastRangeMs, 0)} ms, ${fmt(run.firstFrameBytes / MIB, 2)} MiB), heap ${fmt(run.atFirstFrame.heapMb, 1)} MiB; ` +
            `seek ${fmt(run.seekMs, 0)} ms, ${fmt(run.seekBytesSettled / MIB, 2)} MiB read, heap ${fmt(run.afterSeek.heapMb, 1)} MiB, renderer ${fmt(run.afterSeek.rendererMb, 0)} MiB RSS (list ${fmt(run.list.rendererMb, 0)}), footprint ${fmt(run.afterSeek.renderer.footprint, 0)} MiB (list ${fmt(run.list.renderer.footprint, 0)}, after GC ${fmt(run.held.afterGc.renderer.footprint, 0)}), ` +
            `ArrayBuffers ${fmt(run.afterSeek.backingMb, 1)} MiB (after GC ${fmt(run.held.afterGc.backingMb, 1)}), ${run.afterSeek.domNodes} DOM nodes`,
        );
        runs.push(run);
      }
      results.push({ sizeMb, bag: bag!, importS, runs, node });
    }
    const { text, rows } = report(results, s);
    process.stdout.write(`${text}\n`);
    if (existsSync(NOTES)) {
      writeFileSync(
        NOTES_FILE,
        [
          '# bench playback',
          '',
          `Run at ${new Date().toISOString()}, node ${process.version}, on this 2-core machine shared with other work (\`npm run bench -- playback ${argv.join(' ')}\`).`,
          '',
          '```',
          text,
          '```',
          '',
          ...results.map((r) => `- ${r.sizeMb} MB bag: written in ${fmt(r.bag.writeS, 1)} s, imported, uploaded and verified in ${fmt(r.importS, 0)} s.`),
          '',
        ].join('\n'),
      );
      log(`playback: figures written to ${NOTES_FILE}`);
    }
    return rows;
  },
};
