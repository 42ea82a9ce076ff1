/**
 * The episode player when the recording or the way to it is not what the happy path expects, in
 * Chromium against the playback stack (console/test/playback-harness.ts): a bag written by
 * Python's rosbags; an MCAP cut short mid-file (a recording interrupted by a power loss); a camera
 * in a pixel encoding the player does not draw; the grant provider refusing, failing, hanging or
 * answering links on an origin the installation does not allow; the bucket missing the object,
 * lacking its CORS rule, or holding an object of another size than the manifest's. Each state is
 * said in words on the player, never a blank canvas or a spinner that does not end.
 *
 * Recordings other than the rosbags bag are written here with @mcap/core's McapWriter and
 * @foxglove/rosmsg2-serialization (CDR of ros2msg schemas, as rosbag2 stores them), and imported
 * by a real agent's `import` recorder. The provider faults come from the stack's scripted
 * stand-in in front of the reference provider (`readsFront`): the reference provider has no
 * switch to refuse, fail or hang reads, and the cloud's own read-links tests script a stand-in
 * the same way (test/episodes-read-links.test.ts). Expected values come from the same object
 * read in Node with @fleet/recordings.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DeleteObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { parse as parseRosmsg } from '@foxglove/rosmsg';
import { MessageWriter } from '@foxglove/rosmsg2-serialization';
import zstd from '@foxglove/wasm-zstd';
import { McapIndexedReader, McapWriter } from '@mcap/core';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { cameraImage, openMcap, type McapRecording } from '@fleet/recordings';
import { fileSource } from '@fleet/recordings/node';
import { checkA11y, screenshot } from '../../test/support/browser.js';
import { sendCommand, waitForRobot } from '../../test/support/robots.js';
import type { ReadScript } from '../../test/support/playback-stack.js';
import { startPlaybackHarness, type PlaybackEpisode, type PlaybackHarness } from './playback-harness.js';
import { memoryWritable } from '../../packages/recordings/src/test-mcaps.js';
import { attr, canvasRgb, latestAtOrBefore } from './player-support.js';

const SHOTS = '/tmp/faults-shots';
const NS = 1_000_000_000n;

// ---- recordings written here ------------------------------------------------------------------

const TIME_MSG = 'int32 sec\nuint32 nanosec';
const HEADER_MSG = 'builtin_interfaces/Time stamp\nstring frame_id';
const DEPENDENCIES = `\n================================================================================\nMSG: std_msgs/Header\n${HEADER_MSG}\n================================================================================\nMSG: builtin_interfaces/Time\n${TIME_MSG}\n`;
/** ros2msg schemas as rosbag2 stores them (the message, then its dependencies). */
const SCHEMAS = {
  'sensor_msgs/msg/JointState': `std_msgs/Header header\nstring[] name\nfloat64[] position\nfloat64[] velocity\nfloat64[] effort${DEPENDENCIES}`,
  'sensor_msgs/msg/Image': `std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\nuint32 step\nuint8[] data${DEPENDENCIES}`,
} as const;
type SchemaName = keyof typeof SCHEMAS;

interface Stream {
  topic: string;
  schema: SchemaName;
  hz: number;
  /** The message at `t` (ns), the `i`-th of the stream. */
  message(t: bigint, i: number): Record<string, unknown>;
}

const header = (t: bigint, frame: string) => ({ stamp: { sec: Number(t / NS), nanosec: Number(t % NS) }, frame_id: frame });
const JOINTS = ['shoulder', 'elbow', 'wrist', 'gripper'];

function jointStream(topic: string): Stream {
  return {
    topic,
    schema: 'sensor_msgs/msg/JointState',
    hz: 50,
    message: (t) => {
      const s = Number(t % (1000n * NS)) / 1e9;
      return { header: header(t, 'base_link'), name: JOINTS, position: JOINTS.map((_, k) => Math.sin(1.1 * s + 0.6 * k) + 0.05 * k), velocity: JOINTS.map((_, k) => Math.cos(1.1 * s + 0.6 * k)), effort: [] };
    },
  };
}

/** An rgb8 camera of a moving gradient (each frame different, easy on zstd). */
function rgbStream(topic: string, width: number, height: number): Stream {
  return {
    topic,
    schema: 'sensor_msgs/msg/Image',
    hz: 10,
    message: (t, i) => {
      const data = new Uint8Array(width * height * 3);
      for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) data.set([(x * 4 + i * 7) & 255, (y * 5 + i * 3) & 255, (x + y + i * 11) & 255], (y * width + x) * 3);
      return { header: header(t, 'camera'), height, width, encoding: 'rgb8', is_bigendian: 0, step: width * 3, data };
    },
  };
}

/** A depth camera: `16UC1` (millimetres, little-endian), which the player does not draw. */
function depthStream(topic: string, width: number, height: number): Stream {
  return {
    topic,
    schema: 'sensor_msgs/msg/Image',
    hz: 10,
    message: (t, i) => {
      const data = new Uint8Array(width * height * 2);
      const view = new DataView(data.buffer);
      for (let p = 0; p < width * height; p++) view.setUint16(p * 2, 500 + ((p + i * 13) % 2000), true);
      return { header: header(t, 'depth'), height, width, encoding: '16UC1', is_bigendian: 0, step: width * 2, data };
    },
  };
}

/** A ROS 2 MCAP (profile ros2, cdr, zstd chunks of about `chunkSize` bytes) of `streams` over `durationNs` from `startNs`. */
async function writeRosMcap(startNs: bigint, durationNs: bigint, streams: readonly Stream[], chunkSize: number): Promise<Uint8Array> {
  await zstd.isLoaded;
  const out = memoryWritable();
  const w = new McapWriter({
    writable: out.writable,
    useChunks: true,
    chunkSize,
    compressChunk: (data) => ({ compression: 'zstd', compressedData: zstd.compress(data, 3) }),
  });
  await w.start({ profile: 'ros2', library: 'player-faults test (@mcap/core)' });
  const schemaIds = new Map<SchemaName, number>();
  const writers = new Map<SchemaName, MessageWriter>();
  for (const name of new Set(streams.map((s) => s.schema))) {
    schemaIds.set(name, await w.registerSchema({ name, encoding: 'ros2msg', data: new TextEncoder().encode(SCHEMAS[name]) }));
    writers.set(name, new MessageWriter(parseRosmsg(SCHEMAS[name], { ros2: true })));
  }
  const channels = await Promise.all(streams.map((s) => w.registerChannel({ topic: s.topic, schemaId: schemaIds.get(s.schema)!, messageEncoding: 'cdr', metadata: new Map() })));
  const events: { t: bigint; s: number; i: number }[] = [];
  streams.forEach((s, si) => {
    const period = NS / BigInt(s.hz);
    for (let i = 0; BigInt(i) * period <= durationNs; i++) events.push({ t: startNs + BigInt(i) * period + BigInt(si) * 1_000_000n, s: si, i });
  });
  events.sort((a, b) => (a.t < b.t ? -1 : a.t > b.t ? 1 : a.s - b.s));
  const seq = new Map<number, number>();
  for (const e of events) {
    const s = streams[e.s]!;
    const n = seq.get(e.s) ?? 0;
    seq.set(e.s, n + 1);
    await w.addMessage({ channelId: channels[e.s]!, sequence: n, logTime: e.t, publishTime: e.t, data: writers.get(s.schema)!.writeMessage(s.message(e.t, e.i)) });
  }
  await w.end();
  return out.bytes();
}

async function chunkIndexesOf(bytes: Uint8Array) {
  const reader = await McapIndexedReader.Initialize({
    readable: { size: async () => BigInt(bytes.byteLength), read: async (offset, length) => bytes.subarray(Number(offset), Number(offset + length)) },
  });
  return [...reader.chunkIndexes].sort((a, b) => (a.chunkStartOffset < b.chunkStartOffset ? -1 : 1));
}

/** Puts `bytes` into the import folder as `<name>` in one rename, as a copy should arrive. */
function drop(folder: string, name: string, bytes: Uint8Array): void {
  writeFileSync(join(folder, `.${name}`), bytes);
  renameSync(join(folder, `.${name}`), join(folder, name));
}

// ---- the stack --------------------------------------------------------------------------------

const TRUNCATED_CAMERA = '/camera/front/image_raw';
const DEPTH_CAMERA = '/camera/depth/image_raw';
const COLOR_CAMERA = '/camera/color/image_raw';
const JOINT_TOPIC = '/joint_states';

let h: PlaybackHarness;
let s3: S3Client;
let rosbags: PlaybackEpisode;
let truncated: PlaybackEpisode;
let depth: PlaybackEpisode;
/** What the cut file held, written in full: its chunks' ends, to check where the player stops. */
let truncatedFull: { size: number; cutAt: number; lastWholeChunkEndNs: bigint; fullEndNs: bigint };
const opened: McapRecording[] = [];

beforeAll(async () => {
  h = await startPlaybackHarness({ robots: 0, readsFront: true });
  s3 = new S3Client({ endpoint: h.s3.endpoint, region: h.s3.region, forcePathStyle: true, credentials: { accessKeyId: h.s3.accessKeyId, secretAccessKey: h.s3.secretAccessKey }, maxAttempts: 1 });
  rosbags = await h.addRosbagsEpisode();

  // A complete recording whose depth camera is in an encoding the player does not draw.
  depth = await h.addImportedEpisode(
    async (folder, startNs) => drop(folder, 'depth.mcap', await writeRosMcap(startNs, 3n * NS, [rgbStream(COLOR_CAMERA, 48, 36), depthStream(DEPTH_CAMERA, 48, 36), jointStream(JOINT_TOPIC)], 64 * 1024)),
    { task: 'depth-camera' },
  );

  // An interrupted recording: written whole by @mcap/core, then cut in the middle of a chunk past
  // two thirds of the file (no summary, no footer), as a recorder that lost power leaves it. The
  // import recorder waits for a file to close; this one never does, so the robot's own `fail`
  // takes it as it is (after the import's stop timeout), and it is uploaded and verified as cut.
  const importing = h.addImportedEpisode(
    async (folder, startNs) => {
      const full = await writeRosMcap(startNs, 8n * NS, [rgbStream(TRUNCATED_CAMERA, 64, 48), jointStream(JOINT_TOPIC)], 96 * 1024);
      const chunks = await chunkIndexesOf(full);
      if (chunks.length < 4) throw new Error(`the recording to cut has ${chunks.length} chunks; it needs at least 4`);
      const k = Math.floor(chunks.length * 0.7);
      const cut = chunks[k]!;
      const cutAt = Number(cut.chunkStartOffset + cut.chunkLength / 2n);
      truncatedFull = {
        size: full.byteLength,
        cutAt,
        lastWholeChunkEndNs: chunks.slice(0, k).reduce((m, c) => (c.messageEndTime > m ? c.messageEndTime : m), 0n),
        fullEndNs: chunks.reduce((m, c) => (c.messageEndTime > m ? c.messageEndTime : m), 0n),
      };
      drop(folder, 'interrupted.mcap', full.subarray(0, cutAt));
    },
    { task: 'interrupted' },
  );
  await waitForRobot(h.cloud, rosbags.robotId, (r) => r.recording_state === 'recording', { timeoutMs: 60_000, description: 'importing the interrupted recording' });
  const failed = await sendCommand(h.cloud, rosbags.robotId, 'episodes/fail');
  if (failed.status !== 200) throw new Error(`episodes/fail answered ${failed.status}: ${JSON.stringify(failed.body)}`);
  truncated = await importing;
}, 900_000);

afterAll(async () => {
  s3?.destroy();
  for (const r of opened) await r.close().catch(() => undefined);
  await h?.[Symbol.asyncDispose]();
});

/** The episode's MCAP as the bucket holds it, opened in Node (with `recover`, as the player does). */
async function inNode(e: PlaybackEpisode): Promise<McapRecording> {
  const r = await openMcap(await fileSource(h.episodeFile(e.id)), { recover: true, name: e.mcap });
  opened.push(r);
  return r;
}

async function openPlayer(e: PlaybackEpisode) {
  const tab = await h.signedInPage();
  await tab.page.goto(h.episodeUrl(e.id));
  return tab;
}

const playhead = async (page: Page) => BigInt((await attr(page, '.player-stage', 'data-playhead-ns'))!);

/** Seeks by the slider to `ms` after the start and waits for the playhead to be there. */
async function seekTo(page: Page, ms: number): Promise<bigint> {
  const start = BigInt((await attr(page, '.player-stage', 'data-start-ns'))!);
  await page.getByRole('slider', { name: 'Seek' }).fill(String(ms));
  const t = start + BigInt(ms) * 1_000_000n;
  await expect.poll(() => attr(page, '.player-stage', 'data-playhead-ns')).toBe(t.toString());
  return t;
}

/** The readout's rows (series id, value, sample time) against the JointState at or before `t` in Node. */
async function expectReadout(page: Page, r: McapRecording, t: bigint): Promise<void> {
  const joints = (await latestAtOrBefore(r, JOINT_TOPIC, t))!;
  const js = joints.data as { name: string[]; position: ArrayLike<number> };
  const rows = page.locator('tr[data-series]');
  await expect.poll(() => rows.first().getAttribute('data-log-time'), { timeout: 30_000 }).toBe(joints.logTimeNs.toString());
  const shown = await rows.evaluateAll((trs) => trs.map((tr) => [tr.getAttribute('data-series'), tr.getAttribute('data-value')]));
  expect(shown.length).toBe(js.name.length);
  for (const [series, value] of shown) {
    const m = /^\/joint_states position\.(.+)$/.exec(series ?? '');
    expect(m, `series ${series}`).not.toBeNull();
    expect(Number(value), series!).toBe(js.position[js.name.indexOf(m![1]!)]);
  }
}

/**
 * A fault state: the notice `problem` is shown in words (its title and `words`), alone: no
 * spinner, no canvas, no play button (there is nothing to play), the panel `unavailable`.
 */
async function expectProblem(page: Page, problem: string, title: string, words: readonly (string | RegExp)[], timeout = 60_000): Promise<string> {
  const has = (text: string, w: string | RegExp) => (typeof w === 'string' ? text.includes(w) : w.test(text));
  const notice = page.locator(`.player-problem[data-problem="${problem}"]`);
  await notice.waitFor({ timeout });
  const text = (await notice.textContent()) ?? '';
  expect(await notice.locator('strong').textContent()).toBe(title);
  for (const w of words) expect(has(text, w), `${String(w)} in: ${text}`).toBe(true);
  // The message must not quote a link's signature.
  expect(text).not.toContain('X-Amz');
  expect(await page.locator('.player').getAttribute('data-status')).toBe('unavailable');
  expect(await page.locator('.player-spinner').count()).toBe(0);
  expect(await page.locator('canvas').count()).toBe(0);
  expect(await page.getByRole('button', { name: /^(Play|Pause)$/ }).count()).toBe(0);
  return text;
}

/** The failed loads a fault makes the browser log (HTTP errors, CORS refusals); nothing else may be logged. */
const unexpected = (errors: readonly string[], allowed: RegExp) => errors.filter((e) => !allowed.test(e));

/** With the stand-in answering read requests by `script`, then passing them on again. */
async function withReads<T>(script: ReadScript, run: () => Promise<T>): Promise<T> {
  h.scriptReads(script);
  try {
    return await run();
  } finally {
    h.scriptReads(null);
  }
}

function send(res: Parameters<ReadScript>[1], status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** With the object of `e`'s MCAP replaced by `bytes` (deleted with null), then put back as it was. */
async function withObject<T>(e: PlaybackEpisode, bytes: Uint8Array | null, run: () => Promise<T>): Promise<T> {
  const key = `${e.objectKey}${e.mcap}`;
  const original = readFileSync(h.episodeFile(e.id));
  if (bytes === null) await s3.send(new DeleteObjectCommand({ Bucket: h.s3.bucket, Key: key }));
  else await s3.send(new PutObjectCommand({ Bucket: h.s3.bucket, Key: key, Body: bytes }));
  try {
    return await run();
  } finally {
    await s3.send(new PutObjectCommand({ Bucket: h.s3.bucket, Key: key, Body: original }));
  }
}

// ---- the tests --------------------------------------------------------------------------------

describe('the player on recordings written elsewhere', () => {
  test("a bag written by Python's rosbags plays: both cameras drawn, joints plotted; at a seek the frames, the raw camera's pixels and the readout equal the source's; zero console errors", async () => {
    const r = await inNode(rosbags);
    const jpegTopic = '/camera/front/image_raw/compressed';
    const rawTopic = '/camera/wrist/image_raw';
    const { page, errors } = await openPlayer(rosbags);
    // The first frame: the playhead starts at the main camera's first message (the other camera's
    // may come later: its tile then says it has no frame before the playhead).
    await expect.poll(() => page.locator('canvas[data-frame-log-time]').count(), { timeout: 60_000 }).toBeGreaterThan(0);
    await expect.poll(() => page.locator('.player-plot').count(), { timeout: 30_000 }).toBeGreaterThan(0);
    expect(await page.locator('.player-plot-figure figcaption').allTextContents()).toContain(JOINT_TOPIC);

    const duration = Number((r.endNs! - r.startNs!) / 1_000_000n);
    const t = await seekTo(page, Math.round(duration * 0.6) + 7);
    for (const topic of [jpegTopic, rawTopic]) {
      const m = (await latestAtOrBefore(r, topic, t))!;
      await expect.poll(() => attr(page, `canvas[data-topic="${topic}"]`, 'data-frame-log-time'), { timeout: 30_000 }).toBe(m.logTimeNs.toString());
    }
    // The wrist camera's rows are padded (step 128 for 40 px): drawn exactly, padding dropped.
    const raw = cameraImage(r.channel(rawTopic)!.schemaName, (await latestAtOrBefore(r, rawTopic, t))!.data, rawTopic);
    if (raw.kind !== 'raw') throw new Error('expected a raw frame');
    const drawn = await canvasRgb(page, rawTopic);
    expect([drawn.width, drawn.height]).toEqual([raw.width, raw.height]);
    expect(drawn.rgb.equals(Buffer.from(raw.rgb))).toBe(true);
    // The bag's /joint_states has five joints, the readout one row each.
    const joints = (await latestAtOrBefore(r, JOINT_TOPIC, t))!;
    const js = joints.data as { name: string[]; position: ArrayLike<number> };
    const rows = page.locator('tr[data-series]');
    await expect.poll(() => rows.first().getAttribute('data-log-time'), { timeout: 30_000 }).toBe(joints.logTimeNs.toString());
    const shown = await rows.evaluateAll((trs) => trs.map((tr) => [tr.getAttribute('data-series'), tr.getAttribute('data-value')]));
    expect(shown.map(([s]) => s)).toEqual(js.name.map((n) => `${JOINT_TOPIC} position.${n}`));
    for (const [series, value] of shown) expect(Number(value), series!).toBe(js.position[js.name.indexOf(series!.slice(`${JOINT_TOPIC} position.`.length))]);
    expect(await page.locator('.player-truncated, .player-problem').count()).toBe(0);
    expect(errors).toEqual([]);
    await page.close();
  });

  test('an MCAP cut mid-file (no summary, no footer) verifies at its cut size, says it ends early, plays to its last whole chunk, and a seek near its end shows the source', async () => {
    const listed = truncated.files.find((f) => f.path === truncated.mcap)!;
    expect(listed.size_bytes).toBe(truncatedFull.cutAt);
    expect(listed.size_bytes).toBeLessThan(truncatedFull.size);
    const r = await inNode(truncated);
    expect(r.truncated).toBe(true);
    // What the scan keeps ends with the last chunk before the cut.
    expect(r.endNs).toBe(truncatedFull.lastWholeChunkEndNs);
    expect(r.endNs!).toBeLessThan(truncatedFull.fullEndNs);

    const { page, errors } = await openPlayer(truncated);
    await expect.poll(() => attr(page, `canvas[data-topic="${TRUNCATED_CAMERA}"]`, 'data-frame-log-time'), { timeout: 60_000 }).not.toBeNull();
    expect(await attr(page, '.player-stage', 'data-end-ns')).toBe(r.endNs!.toString());
    expect(await attr(page, '.player-stage', 'data-start-ns')).toBe(r.startNs!.toString());
    const notice = page.locator('.player-truncated');
    const ms = Number((r.endNs! - r.startNs!) / 1_000_000n);
    const clock = `${Math.floor(ms / 60_000)}:${((ms % 60_000) / 1000).toFixed(3).padStart(6, '0')}`;
    expect(await notice.locator('strong').textContent()).toBe(`Recording ends early at ${clock}`);
    expect(await notice.textContent()).toMatch(/cut short/);

    // Near the end: the frame and the readout are the source's.
    const t = await seekTo(page, ms - 250);
    const frame = (await latestAtOrBefore(r, TRUNCATED_CAMERA, t))!;
    await expect.poll(() => attr(page, `canvas[data-topic="${TRUNCATED_CAMERA}"]`, 'data-frame-log-time'), { timeout: 30_000 }).toBe(frame.logTimeNs.toString());
    await expectReadout(page, r, t);
    // Played from there, it ends at the recording's (recovered) end, with no error.
    await page.getByRole('button', { name: 'Play' }).click();
    await expect.poll(() => attr(page, '.player-stage', 'data-status'), { timeout: 30_000 }).toBe('ended');
    expect(await playhead(page)).toBe(r.endNs!);
    await expect.poll(() => page.getByRole('button', { name: 'Play' }).count()).toBe(1);
    const last = (await latestAtOrBefore(r, TRUNCATED_CAMERA, r.endNs!))!;
    await expect.poll(() => attr(page, `canvas[data-topic="${TRUNCATED_CAMERA}"]`, 'data-frame-log-time'), { timeout: 30_000 }).toBe(last.logTimeNs.toString());
    expect(await page.locator('.player-problem').count()).toBe(0);
    await screenshot(page, SHOTS, 'truncated', { fullPage: true });
    expect(errors).toEqual([]);
    await page.close();
  });

  test('a camera in an encoding the player does not draw (16UC1 depth) is named with its encoding on its tile; the other camera and the joints still play', async () => {
    const r = await inNode(depth);
    const { page, errors } = await openPlayer(depth);
    await expect.poll(() => attr(page, `canvas[data-topic="${COLOR_CAMERA}"]`, 'data-frame-log-time'), { timeout: 60_000 }).not.toBeNull();
    // Past the depth camera's first message (the playhead starts at the colour camera's first).
    const t = await seekTo(page, 1717);
    const tile = page.locator(`figure.player-camera[data-topic="${DEPTH_CAMERA}"]`);
    const note = tile.locator('.player-canvas-note.bad');
    await note.waitFor({ timeout: 30_000 });
    const text = (await note.textContent()) ?? '';
    expect(text).toContain(DEPTH_CAMERA);
    expect(text).toContain('16UC1');
    expect(text).toMatch(/rgb8/);
    expect(await tile.locator('canvas').getAttribute('class')).toBe('blank');
    expect(await tile.locator('canvas').getAttribute('data-frame-log-time')).toBeNull();

    // The rest plays: the colour camera and the readout follow the seek, and playback.
    const color = (await latestAtOrBefore(r, COLOR_CAMERA, t))!;
    await expect.poll(() => attr(page, `canvas[data-topic="${COLOR_CAMERA}"]`, 'data-frame-log-time'), { timeout: 30_000 }).toBe(color.logTimeNs.toString());
    await expectReadout(page, r, t);
    expect(await note.textContent()).toContain('16UC1');
    await page.getByRole('button', { name: 'Play' }).click();
    await expect.poll(async () => (await playhead(page)) > t + 300_000_000n, { timeout: 30_000 }).toBe(true);
    await page.getByRole('button', { name: 'Pause' }).click();
    expect(await page.locator('.player-problem').count()).toBe(0);
    expect(await checkA11y(page)).toEqual([]);
    await screenshot(page, SHOTS, 'depth-camera', { fullPage: false });
    expect(errors).toEqual([]);
    await page.close();
  });
});

describe("the grant provider's faults, each in words on the player", () => {
  test('a refusal (403 read_links_refused) shows the provider\'s reason once', async () => {
    await withReads(
      (_req, res) => send(res, 200, { refused: { message: 'reads are paused for this bucket' } }),
      async () => {
        const { page, errors } = await openPlayer(rosbags);
        const text = await expectProblem(page, 'refused', 'Read links refused', [/provider refused to issue read links/, /“reads are paused for this bucket”/, /read_links_refused/]);
        // Said once: not the cloud's preamble and the provider's words again.
        expect(text.split('reads are paused for this bucket').length - 1, text).toBe(1);
        expect(text).not.toContain('refused read links:');
        expect(h.readRequests.at(-1)?.episode_id).toBe(rosbags.id);
        expect(await checkA11y(page)).toEqual([]);
        await screenshot(page, SHOTS, 'provider-refused', { fullPage: false });
        expect(unexpected(errors, /status of 403/)).toEqual([]);
        await page.close();
      },
    );
  });

  test('an HTTP error (502 provider_failed) says the provider failed and how', async () => {
    await withReads(
      (_req, res) => send(res, 500, { error: 'boom' }),
      async () => {
        const { page, errors } = await openPlayer(rosbags);
        await expectProblem(page, 'provider_failed', 'Grant provider failed', [/answered with an HTTP error/, /500/, /provider_failed/, /try again later/i]);
        expect(unexpected(errors, /status of 502/)).toEqual([]);
        await page.close();
      },
    );
  });

  test('no answer (504 provider_timeout) says it timed out, with the time waited', async () => {
    await withReads(
      () => undefined,
      async () => {
        const { page, errors } = await openPlayer(rosbags);
        // While the cloud waits for the provider, the player says what it waits for.
        await expect.poll(() => page.locator('.player-state').textContent(), { timeout: 30_000 }).toMatch(/read links/i);
        await expectProblem(page, 'provider_timeout', 'Grant provider timed out', [/did not answer within 10 s/, /provider_timeout/]);
        expect(unexpected(errors, /status of 504/)).toEqual([]);
        await page.close();
      },
    );
  }, 120_000);

  test('links on an origin the installation does not allow (502 read_origin_not_allowed) name the origin and the fix', async () => {
    await withReads(
      (req, res) => send(res, 200, { files: req.request.files.map((f) => ({ path: f.path, url: `https://elsewhere.example/bucket/${f.path}?X-Amz-Signature=abc`, expires_at: new Date(Date.now() + 600_000).toISOString() })) }),
      async () => {
        const { page, errors } = await openPlayer(rosbags);
        await expectProblem(page, 'origin_not_allowed', 'Storage origin not allowed', [/https:\/\/elsewhere\.example/, /--read-origin https:\/\/elsewhere\.example/, /read_origin_not_allowed/]);
        expect(unexpected(errors, /status of 502/)).toEqual([]);
        await page.close();
      },
    );
  });
});

describe("the bucket's faults, each in words on the player", () => {
  test('the object deleted from the bucket (404): "Recording not in the bucket", naming the file', async () => {
    await withObject(rosbags, null, async () => {
      const { page, errors } = await openPlayer(rosbags);
      await expectProblem(page, 'object_not_found', 'Recording not in the bucket', [rosbags.mcap, /no object/, /HTTP 404/, /deleted or moved/]);
      expect(unexpected(errors, /status of 404/)).toEqual([]);
      await page.close();
    });
  });

  test('the bucket without a CORS rule for the console: the browser could not fetch it, CORS named as the likely cause', async () => {
    await h.s3.setCors(null);
    try {
      const { page, errors } = await openPlayer(rosbags);
      const text = await expectProblem(page, 'fetch_failed', 'The browser could not fetch the recording', [rosbags.mcap, /got no answer/, /CORS rule/, /Range GETs/, `console's origin (${h.baseUrl})`]);
      // The likely cause said once (the reader's own hint is not repeated).
      expect(text.split('CORS rule').length - 1, text).toBe(1);
      await screenshot(page, SHOTS, 'bucket-no-cors', { fullPage: false });
      expect(unexpected(errors, /CORS policy|net::ERR_FAILED/)).toEqual([]);
      await page.close();
    } finally {
      await h.s3.setCors([h.baseUrl, h.cloud.http]);
    }
  });

  test("an object whose size is not the manifest's: the file changed, both sizes named", async () => {
    const original = readFileSync(h.episodeFile(rosbags.id));
    const listed = rosbags.files.find((f) => f.path === rosbags.mcap)!;
    const bigger = Buffer.concat([original, Buffer.alloc(4096, 1)]);
    await withObject(rosbags, bigger, async () => {
      const { page, errors } = await openPlayer(rosbags);
      await expectProblem(page, 'size_mismatch', 'The file in the bucket changed', [rosbags.mcap, `the object is ${bigger.length} bytes, but the robot's manifest lists ${listed.size_bytes}`, /not played/]);
      expect(errors).toEqual([]);
      await page.close();
    });
  });

  test('put back as it was, the same episode plays again', async () => {
    const { page, errors } = await openPlayer(rosbags);
    await expect.poll(() => attr(page, 'canvas[data-topic="/camera/wrist/image_raw"]', 'data-frame-log-time'), { timeout: 60_000 }).not.toBeNull();
    expect(await page.locator('.player-problem').count()).toBe(0);
    expect(errors).toEqual([]);
    await page.close();
  });
});
