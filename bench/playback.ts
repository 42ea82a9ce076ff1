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
 * The RSS of the tab's renderer, MiB: the largest renderer process of this benchmark's chromium
 * (descendants of this process, through chromium's zygote, with `--type=renderer`), less the
 * browser UI's `--top-chrome-webui` one. With one tab open the others are a spare renderer or
 * none: the largest holds the page. RSS counts the renderer's shared libraries and V8 snapshot
 * too (a renderer holding an empty page is about 110 MiB here). Chromium rewrites its
 * children's command lines into one space-separated string, hence the split on both.
 */
function tabRendererMb(): number {
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
  for (const p of procs) {
    if (!mine.has(p.pid) || !p.args.includes('--type=renderer') || p.args.includes('--top-chrome-webui') || p.args.includes('--extension-process')) continue;
    try {
      largestKb = Math.max(largestKb, Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${p.pid}/status`, 'utf8'))?.[1] ?? 0));
    } catch {
      // gone meanwhile
    }
  }
  if (largestKb === 0) throw new BenchFailure("found no renderer process of this benchmark's chromium in /proc");
  return largestKb / 1024;
}

interface TabMemory {
  heapMb: number;
  rendererMb: number;
  domNodes: number;
}

async function tabMemory(cdp: CDPSession): Promise<TabMemory> {
  const { metrics } = await cdp.send('Performance.getMetrics');
  const heap = metrics.find((m) => m.name === 'JSHeapUsedSize')?.value ?? Number.NaN;
  let domNodes = Number.NaN;
  try {
    domNodes = (await cdp.send('Memory.getDOMCounters')).nodes;
  } catch {
    // not in this chromium
  }
  return { heapMb: heap / MIB, rendererMb: tabRendererMb(), domNodes };
}

/**
 * Records, in the page, every value a canvas's `data-frame-log-time` takes and when
 * (performance.now(): ms since the navigation started), the newest 1,000.
 */
const FRAME_PROBE = `(() => {
  const probe = { changes: [] };
  globalThis.__fleetBench = probe;
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
  const { page } = await h.signedInPage();
  try {
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    // The baseline heap: the same console, on the episode list (no recording open).
    await page.goto(`${h.baseUrl}/console/episodes`);
    await page.getByRole('heading', { level: 1 }).first().waitFor();
    const list = await tabMemory(cdp);

    await page.addInitScript(FRAME_PROBE);
    await h.clearS3Requests();
    await page.goto(h.episodeUrl(ep.id));
    const first = await waitForFrame(page, 0, 0n, BigInt('18446744073709551615'), 120_000);
    const firstFrameNs = BigInt(first.v);
    if (firstFrameNs !== bag.firstFrameNs) throw new BenchFailure(`the player drew the frame at ${firstFrameNs} ns first, not the bag's first (${bag.firstFrameNs} ns)`);
    const firstFrameBytes = sumBytes(await h.s3Requests());
    const phases = await phasesOf(page, h.bucketOrigin, first.t);
    const atFirstFrame = await tabMemory(cdp);

    // A seek to the middle with the seek bar; the frame drawn is the newest at or before it.
    const seek = page.getByLabel('Seek', { exact: true });
    const maxMs = Number(await seek.getAttribute('max'));
    const midMs = Math.round(maxMs / 2);
    const targetNs = bag.firstFrameNs + BigInt(midMs) * 1_000_000n;
    const frameNs = BigInt(Math.ceil(1e9 / fps));
    await h.clearS3Requests();
    const t0 = await pageNow(page);
    await seek.fill(String(midMs));
    const drawn = await waitForFrame(page, t0, targetNs - 2n * frameNs, targetNs, 120_000);
    const seekMs = drawn.t - t0;
    const seekBytesToFrame = sumBytes(await h.s3Requests());
    const seekBytesSettled = await settledBytes(h, 1000, 15_000);
    const afterSeek = await tabMemory(cdp);
    await cdp.detach();
    return { firstFrameMs: first.t, firstFrameNs, firstFrameBytes, phases, atFirstFrame, seekMs, seekBytesToFrame, seekBytesSettled, afterSeek, list };
  } finally {
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
  lines.push(
    `playback: ${s.runs} run(s) per size, each in a fresh tab; camera ${s.width}x${s.height} JPEG at ${s.fps} fps + JointState at ${JOINT_HZ} Hz, zstd chunks of ${CHUNK_BYTES / 1024} KiB; medians`,
    t,
  );
  for (const r of results) {
    const label = r.bag.bytes >= 1e9 * 0.95 ? `${fmt(r.bag.bytes / 1e9, 1)} GB` : `${fmt(r.bag.bytes / MB, 0)} MB`;
    const ff = median(r.runs.map((x) => x.firstFrameMs));
    const nodeMs = median(r.node.ms);
    const heapAfter = median(r.runs.map((x) => x.afterSeek.heapMb));
    const listHeap = median(r.runs.map((x) => x.list.heapMb));
    const listRss = median(r.runs.map((x) => x.list.rendererMb));
    const seekBytes = median(r.runs.map((x) => x.seekBytesSettled));
    const rss = median(r.runs.map((x) => x.afterSeek.rendererMb));
    const ph = (k: keyof Phases) => median(r.runs.map((x) => x.phases[k]));
    lines.push(
      `${label}: first frame ${fmt(ff, 0)} ms after the navigation: read links asked at ${fmt(ph('readLinksStartMs'), 0)} ms, answered at ${fmt(ph('readLinksMs'), 0)} ms, ` +
        `${fmt(ph('ranges'), 0)} range GETs to the bucket from ${fmt(ph('firstRangeMs'), 0)} to ${fmt(ph('lastRangeMs'), 0)} ms, then decoding and drawing`,
    );
    lines.push(
      `${label}: first frame ${fmt(ff, 0)} ms in the console vs ${fmt(nodeMs, 0)} ms in Node from disk (target < ${FIRST_FRAME_TARGET_MS} ms both: ${ff < FIRST_FRAME_TARGET_MS && nodeMs < FIRST_FRAME_TARGET_MS ? 'met' : 'NOT met'}); ` +
        `the tab's renderer ${fmt(rss, 0)} MiB RSS after the seek, ${fmt(rss - listRss, 0)} MiB more than on the episode list (${fmt(listRss, 0)} MiB)` +
        (r.bag.bytes >= 0.95e9 ? ` (target < ${MEMORY_TARGET_MB} MB: ${rss * 1.048576 < MEMORY_TARGET_MB ? 'met' : 'NOT met'}; the player's share ${(rss - listRss) * 1.048576 < MEMORY_TARGET_MB ? 'meets it' : 'does not'})` : '') +
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
            `seek ${fmt(run.seekMs, 0)} ms, ${fmt(run.seekBytesSettled / MIB, 2)} MiB read, heap ${fmt(run.afterSeek.heapMb, 1)} MiB, renderer ${fmt(run.afterSeek.rendererMb, 0)} MiB RSS, ${run.afterSeek.domNodes} DOM nodes`,
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
