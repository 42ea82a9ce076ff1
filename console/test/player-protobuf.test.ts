/**
 * The episode player on a protobuf recording, under the console's real Content-Security-Policy
 * (no 'unsafe-eval': protobufjs, which compiles its decoders with `new Function`, could not run
 * here; @fleet/recordings decodes protobuf with @bufbuild/protobuf's reflection). The MCAP is
 * written by code that is not ours, Foxglove's Python mcap-protobuf-support
 * (test/python/write_judge_recordings.py protobuf, zstd chunks): a foxglove.CompressedImage JPEG
 * camera, a foxglove.RawImage rgb8 one and `arm.JointPositions`, a numeric type built from a
 * descriptor. A real agent imports it into the playback harness's bucket; the browser reads it
 * from there. Expected values come from the same object read in Node with @fleet/recordings
 * (whose protobuf output packages/recordings/src/protobuf.test.ts holds to protobufjs'); JPEG
 * frames are compared with ffmpeg's decode of the same bytes, within player.test.ts' tolerance.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { cameraImage, openMcap, type McapRecording } from '@fleet/recordings';
import { fileSource } from '@fleet/recordings/node';
import { ensureDebianPackages, FFMPEG } from '../../test/support/debian.js';
import { ensurePythonEnv } from '../../test/support/python.js';
import { writePythonRecording } from '../../test/support/recordings.js';
import { startPlaybackHarness, type PlaybackEpisode, type PlaybackHarness } from './playback-harness.js';
import { attr, canvasRgb, latestAtOrBefore, seekIntoRecording } from './player-support.js';

const JPEG_TOPIC = '/camera/front';
const RAW_TOPIC = '/camera/side';
const JOINTS_TOPIC = '/arm/joints';
/** Mean absolute difference per channel accepted between Chromium's and ffmpeg's decode of one JPEG (as player.test.ts). */
const JPEG_MAD = 2;

let h: PlaybackHarness;
let episode: PlaybackEpisode;
let recording: McapRecording;
let scratch: string;

beforeAll(async () => {
  const missing = ensureDebianPackages([FFMPEG]);
  if (missing.length > 0) throw new Error('ffmpeg is needed: apt-get install -y ffmpeg (as root the tests install it)');
  const python = ensurePythonEnv();
  scratch = mkdtempSync(join(tmpdir(), 'fleet-player-protobuf-'));
  h = await startPlaybackHarness({ robots: 0 });
  // Written under a `.` name and renamed in when complete, as the import recorder documents.
  episode = await h.addImportedEpisode(
    async (folder, startNs) => {
      const hidden = join(folder, '.protobuf-run.mcap');
      await writePythonRecording(python, 'protobuf', hidden, startNs, { cwd: scratch });
      renameSync(hidden, join(folder, 'protobuf-run.mcap'));
    },
    { task: 'protobuf-import' },
  );
  recording = await openMcap(await fileSource(h.episodeFile(episode.id)), { name: episode.mcap });
}, 900_000);

afterAll(async () => {
  await recording?.close();
  await h?.[Symbol.asyncDispose]();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

function ffmpegRgb(jpeg: Uint8Array): Buffer {
  const file = join(scratch, 'frame.jpg');
  writeFileSync(file, jpeg);
  // Chroma interpolated at full resolution with exact rounding: on frames this small (48x36, 4:2:0)
  // swscale's default conversion alone is 3.4 off Chromium's decode, this 0.8 (the frame before, 15).
  return execFileSync('ffmpeg', ['-v', 'error', '-i', file, '-sws_flags', 'bicubic+accurate_rnd+full_chroma_int', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-'], { maxBuffer: 64 * 1024 * 1024 });
}

function meanAbsDiff(a: Buffer, b: Buffer): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
  return sum / a.length;
}

/** The value at a series key's path (`position[1]`, `velocity[2]`) of a decoded message. */
function valueAt(msg: unknown, key: string): unknown {
  let v: unknown = msg;
  for (const part of key.match(/[^.[\]]+/g) ?? []) v = typeof v === 'object' && v !== null ? (v as Record<string, unknown>)[part] : undefined;
  return v;
}

describe('the player on a protobuf MCAP written by mcap-protobuf-support', () => {
  test('the recording is the one Python wrote: protobuf channels, zstd chunks', () => {
    const listed = recording.channels.map((c) => [c.topic, c.schemaName, c.messageEncoding, c.schemaEncoding]).sort();
    expect(listed).toEqual([
      [JOINTS_TOPIC, 'arm.JointPositions', 'protobuf', 'protobuf'],
      [JPEG_TOPIC, 'foxglove.CompressedImage', 'protobuf', 'protobuf'],
      [RAW_TOPIC, 'foxglove.RawImage', 'protobuf', 'protobuf'],
    ]);
  });

  test('opens under the real CSP with zero console errors, draws both cameras, plots the joints; a seek shows the source frame and the readout equals the source', async () => {
    const page = h.page;
    const res = await page.goto(h.episodeUrl(episode.id));
    const csp = res!.headers()['content-security-policy'] ?? '';
    expect(csp).toContain("script-src 'self' 'wasm-unsafe-eval'");
    expect(csp).not.toContain("'unsafe-eval'");
    await page.getByRole('heading', { name: 'Recording' }).waitFor();
    // The playhead starts at the main camera's first frame (the other camera and the joints start
    // a few ms later: nothing of theirs is before it yet).
    await expect.poll(() => attr(page, `canvas[data-topic="${JPEG_TOPIC}"]`, 'data-frame-log-time'), { timeout: 60_000 }).toBe((await recording.first(JPEG_TOPIC))!.logTimeNs.toString());
    // No topic failed to decode (the picker would list it) and no problem notice.
    await expect.poll(() => page.locator('.player-plot').count(), { timeout: 30_000 }).toBeGreaterThan(0);
    expect(await page.locator('.player-problem').count()).toBe(0);
    expect(await page.getByText(/protobuf channels are not decoded|does not decode|schema_invalid|message_invalid/).count()).toBe(0);

    const playhead = await seekIntoRecording(page);

    // The JPEG camera: the latest frame at or before the playhead, drawn as ffmpeg decodes it.
    const jpeg = (await latestAtOrBefore(recording, JPEG_TOPIC, playhead))!;
    await expect.poll(() => attr(page, `canvas[data-topic="${JPEG_TOPIC}"]`, 'data-frame-log-time'), { timeout: 30_000 }).toBe(jpeg.logTimeNs.toString());
    const jpegImage = cameraImage('foxglove.CompressedImage', jpeg.data, 'jpeg');
    if (jpegImage.kind !== 'compressed') throw new Error('expected a compressed frame');
    expect([...jpegImage.data.subarray(0, 2)]).toEqual([0xff, 0xd8]);
    const reference = ffmpegRgb(jpegImage.data);
    const drawnJpeg = await canvasRgb(page, JPEG_TOPIC);
    expect([drawnJpeg.width, drawnJpeg.height]).toEqual([48, 36]);
    expect(drawnJpeg.rgb.length).toBe(reference.length);
    expect(meanAbsDiff(drawnJpeg.rgb, reference)).toBeLessThanOrEqual(JPEG_MAD);
    // The tolerance tells frames apart: the one before is far off.
    const previous = cameraImage('foxglove.CompressedImage', (await latestAtOrBefore(recording, JPEG_TOPIC, jpeg.logTimeNs - 1n))!.data, 'jpeg');
    if (previous.kind !== 'compressed') throw new Error('expected a compressed frame');
    expect(meanAbsDiff(drawnJpeg.rgb, ffmpegRgb(previous.data))).toBeGreaterThan(4 * JPEG_MAD);

    // The raw camera (rows padded to a step of 100): exactly the source's pixels.
    const raw = (await latestAtOrBefore(recording, RAW_TOPIC, playhead))!;
    await expect.poll(() => attr(page, `canvas[data-topic="${RAW_TOPIC}"]`, 'data-frame-log-time'), { timeout: 30_000 }).toBe(raw.logTimeNs.toString());
    const rawImage = cameraImage('foxglove.RawImage', raw.data, 'raw');
    if (rawImage.kind !== 'raw') throw new Error('expected a raw frame');
    const drawnRaw = await canvasRgb(page, RAW_TOPIC);
    expect([drawnRaw.width, drawnRaw.height]).toEqual([rawImage.width, rawImage.height]);
    expect(drawnRaw.rgb.equals(Buffer.from(rawImage.rgb))).toBe(true);

    // The readout: the joints' plotted series at the playhead are the source's latest message's values.
    const joints = (await latestAtOrBefore(recording, JOINTS_TOPIC, playhead))!;
    const rows = page.locator(`tr[data-series^="${JOINTS_TOPIC} "]`);
    await expect.poll(() => rows.first().getAttribute('data-log-time'), { timeout: 30_000 }).toBe(joints.logTimeNs.toString());
    const shown = await rows.evaluateAll((trs) => trs.map((tr) => ({ series: tr.getAttribute('data-series') ?? '', value: tr.getAttribute('data-value'), logTime: tr.getAttribute('data-log-time') })));
    const keys = shown.map(({ series }) => series.slice(JOINTS_TOPIC.length + 1));
    expect(keys).toEqual(expect.arrayContaining(['position[0]', 'position[1]', 'position[2]']));
    // The message's google.protobuf.Timestamp is a time, not a signal: not plotted.
    expect(keys.filter((k) => k.startsWith('timestamp'))).toEqual([]);
    for (const { series, value, logTime } of shown) {
      const key = series.slice(JOINTS_TOPIC.length + 1);
      expect(logTime, series).toBe(joints.logTimeNs.toString());
      const want = valueAt(joints.data, key);
      expect(typeof want, `${series} in the source`).toBe('number');
      expect(Number(value), series).toBe(want);
    }
    // The joints moved: the values shown are not the first message's.
    const first = (await recording.first(JOINTS_TOPIC))!;
    expect(valueAt(joints.data, 'position[0]')).not.toBe(valueAt(first.data, 'position[0]'));

    expect(h.errors).toEqual([]);
  });
});
