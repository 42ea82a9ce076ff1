import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { rm, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { WriterError } from './errors.js';
import { tempSibling } from './files.js';

/** `av1` is libsvtav1 (LeRobot's default); `h264` is libx264. */
export type VideoCodec = 'av1' | 'h264';

/** How camera frames are encoded; the defaults are LeRobot's `VideoEncoderConfig`. */
export interface VideoEncoding {
  codec: VideoCodec;
  /** GOP size (LeRobot: 2, so any frame is at most one frame from a keyframe). */
  gop: number;
  crf: number;
  /** libsvtav1's preset (LeRobot: 12); libx264's preset name, or null for its default. */
  preset: number | string | null;
  /**
   * Encoder threads: svtav1's `lp`, x264's `threads`. x264's output depends on its thread count,
   * so it is pinned (default 1) for the same bytes on every machine; svtav1 gave the same bytes
   * with and without `lp` pinned, so it is left to the encoder unless set.
   */
  threads: number | null;
  /**
   * Every camera scaled to exactly this size before encoding (`--resize WxH`), by ffmpeg's
   * `scale` filter with `SCALE_FLAGS`, in the process that encodes; null: padded (features.ts
   * `videoSize`).
   */
  resize: { width: number; height: number } | null;
  /** The binaries, for tests or unusual installs. */
  ffmpegPath: string;
  ffprobePath: string;
}

export function videoEncoding(codec: VideoCodec = 'av1', overrides: Partial<VideoEncoding> = {}): VideoEncoding {
  return {
    codec,
    gop: 2,
    crf: 30,
    preset: codec === 'av1' ? 12 : null,
    threads: codec === 'h264' ? 1 : null,
    resize: null,
    ffmpegPath: 'ffmpeg',
    ffprobePath: 'ffprobe',
    ...overrides,
  };
}

/** The encoder's name as ffmpeg knows it, and the codec name LeRobot records (`video.codec`). */
export function codecNames(codec: VideoCodec): { encoder: string; canonical: string } {
  return codec === 'av1' ? { encoder: 'libsvtav1', canonical: 'av1' } : { encoder: 'libx264', canonical: 'h264' };
}

/**
 * swscale's bilinear filter for `--resize`: a triangle kernel that swscale widens by the scale
 * factor when it shrinks (so a 640x480 camera brought to 96x96 is averaged, not aliased), the
 * interpolation of torchvision's `Resize` (bilinear, antialiased), which LeRobot's
 * `ImageCropResizeProcessorStep` and the diffusion policy's `resize_shape` apply.
 * `area` would be a box when enlarging; `accurate_rnd` rounds exactly rather than by the faster
 * approximation, so the output does not depend on which SIMD path the CPU takes.
 */
export const SCALE_FLAGS = 'bilinear+accurate_rnd';

// No encoder string, creation time or metadata: the same frames give the same bytes.
const BITEXACT_OUTPUT = ['-fflags', '+bitexact', '-flags:v', '+bitexact', '-map_metadata', '-1', '-map_chapters', '-1'];

function codecArgs(enc: VideoEncoding): string[] {
  const args = ['-c:v', codecNames(enc.codec).encoder, '-pix_fmt', 'yuv420p', '-g', String(enc.gop), '-crf', String(enc.crf)];
  if (enc.preset !== null) args.push('-preset', String(enc.preset));
  if (enc.codec === 'av1') {
    args.push('-svtav1-params', ['fast-decode=0', ...(enc.threads !== null ? [`lp=${enc.threads}`] : [])].join(':'));
  } else if (enc.threads !== null) {
    args.push('-threads', String(enc.threads));
  }
  return args;
}

interface Run {
  stdin: NodeJS.WritableStream;
  done: Promise<string>;
}

function run(bin: string, args: string[], withStdin: boolean): Run {
  const child = spawn(bin, args, { stdio: [withStdin ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    if (err.length < 65_536) err += d;
  });
  // A dead encoder closes its stdin; the exit code below carries the reason.
  child.stdin?.on('error', () => undefined);
  const done = new Promise<string>((resolvePromise, reject) => {
    child.on('error', (e: NodeJS.ErrnoException) => {
      const hint = e.code === 'ENOENT' ? ` (not installed? the export needs ffmpeg and ffprobe, with libsvtav1 for AV1: on Debian, apt-get install ffmpeg)` : '';
      reject(new WriterError('ffmpeg_failed', `${bin} could not start: ${e.message}${hint}`, { cause: e }));
    });
    child.on('close', (code, signal) => {
      if (code === 0) resolvePromise(out);
      else reject(new WriterError('ffmpeg_failed', `${bin} exited with ${code ?? signal}: ${err.trim().slice(-2000)}`));
    });
  });
  // Callers await `done` after feeding stdin; until then a rejection must not count as unhandled.
  done.catch(() => undefined);
  return { stdin: child.stdin!, done };
}

/**
 * Encode `length` rgb24 frames of `size`, streamed to ffmpeg's stdin one at a time, into an mp4 at
 * constant `fps` (scaled to `enc.resize` on the way when set). `onFrame` sees each frame before it is written (for stats). Throws `frame_mismatch` when
 * the source yields a frame of the wrong size or a count other than `length`.
 */
export async function encodeFrames(
  outPath: string,
  frames: AsyncIterable<Uint8Array>,
  size: { width: number; height: number; length: number; fps: number },
  enc: VideoEncoding,
  onFrame: (index: number, frame: Uint8Array) => void,
): Promise<void> {
  const frameBytes = size.width * size.height * 3;
  const args = [
    '-hide_banner', '-v', 'error',
    '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', `${size.width}x${size.height}`, '-r', String(size.fps), '-i', 'pipe:0',
    '-frames:v', String(size.length),
    ...(enc.resize !== null ? ['-vf', `scale=${enc.resize.width}:${enc.resize.height}:flags=${SCALE_FLAGS}`] : []),
    ...codecArgs(enc), '-fps_mode', 'cfr', ...BITEXACT_OUTPUT,
    '-movflags', '+faststart', '-f', 'mp4', '-y', outPath,
  ];
  const proc = run(enc.ffmpegPath, args, true);
  let count = 0;
  try {
    for await (const frame of frames) {
      if (frame.byteLength !== frameBytes) {
        throw new WriterError('frame_mismatch', `frame ${count} has ${frame.byteLength} bytes, expected ${frameBytes}`);
      }
      if (count >= size.length) throw new WriterError('frame_mismatch', `more than ${size.length} frames`);
      onFrame(count, frame);
      count++;
      if (!proc.stdin.write(frame)) {
        await Promise.race([once(proc.stdin, 'drain'), proc.done]);
      }
    }
    if (count !== size.length) throw new WriterError('frame_mismatch', `${count} frames, expected ${size.length}`);
  } catch (err) {
    proc.stdin.end();
    await proc.done.catch(() => undefined);
    throw err;
  }
  proc.stdin.end();
  await proc.done;
}

/** The video stream's duration in seconds (`stream.duration * time_base`, what LeRobot reads). */
export async function probeDurationS(path: string, enc: VideoEncoding): Promise<number> {
  const out = await run(
    enc.ffprobePath,
    ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'stream=duration', '-of', 'csv=p=0', path],
    false,
  ).done;
  const value = Number(out.trim());
  if (!Number.isFinite(value)) throw new WriterError('ffmpeg_failed', `ffprobe gave no duration for ${path}: ${out}`);
  return value;
}

/**
 * Concatenate mp4s of the same encoding into `outPath` without re-encoding (ffmpeg's concat
 * demuxer, `-c copy`), as LeRobot's `concatenate_video_files` does.
 *
 * Each file is given its `duration` in the list. Without it the demuxer starts a file where the
 * previous one's container duration ends, and an mp4's is in milliseconds: 31 frames at 30 fps
 * are 1.033 s, rounded to 1.034, so episode k would start k x 0.67 ms late, past LeRobot's
 * `tolerance_s` of 1e-4 s after one episode (`FrameTimestampError`), while meta/episodes says
 * `from_timestamp = frames before / fps`. The durations are differences of the rounded cumulative
 * starts in microseconds (the demuxer's unit), so the rounding never adds up: every episode
 * starts within 0.5 us of `frames before / fps`, which the track's timescale then rounds to the
 * exact tick.
 */
export async function concatVideos(inputs: readonly { path: string; frames: number }[], outPath: string, enc: VideoEncoding, fps: number): Promise<void> {
  const list = `${tempSibling(outPath)}.ffconcat`;
  const quote = (p: string) => `'${resolve(p).replaceAll("'", "'\\''")}'`;
  const startUs = (frames: number) => Math.round((frames * 1e6) / fps);
  let before = 0;
  const lines = inputs.map((input) => {
    const us = startUs(before + input.frames) - startUs(before);
    before += input.frames;
    return `file ${quote(input.path)}\nduration ${(us / 1e6).toFixed(6)}\n`;
  });
  await writeFile(list, `ffconcat version 1.0\n${lines.join('')}`);
  try {
    await run(
      enc.ffmpegPath,
      ['-hide_banner', '-v', 'error', '-f', 'concat', '-safe', '0', '-i', list, '-map', '0:v:0', '-c', 'copy', ...BITEXACT_OUTPUT,
        '-movflags', '+faststart', '-f', 'mp4', '-y', outPath],
      false,
    ).done;
  } finally {
    await rm(list, { force: true });
  }
}
