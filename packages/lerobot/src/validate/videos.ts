import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { EpisodeRecord } from './episodes.js';
import { TIMESTAMP_TOLERANCE_S } from './data.js';
import { frameSize, type DatasetInfo } from './info.js';
import type { ProblemLog } from './problems.js';

const run = promisify(execFile);

export interface VideoProbe {
  frames: number;
  width: number;
  height: number;
  /** r_frame_rate as a number. */
  fps: number;
}

/** Decodes the first video stream to count its frames (a container's own count can lie). */
export async function probeVideo(ffprobe: string, path: string): Promise<VideoProbe> {
  const { stdout } = await run(ffprobe, [
    '-v', 'error', '-count_frames', '-select_streams', 'v:0',
    '-show_entries', 'stream=nb_read_frames,width,height,r_frame_rate', '-of', 'json', path,
  ]);
  const stream = (JSON.parse(stdout) as { streams?: Array<Record<string, unknown>> }).streams?.[0];
  if (stream === undefined) throw new Error('no video stream');
  const [num, den] = String(stream['r_frame_rate']).split('/').map(Number);
  return {
    frames: Number(stream['nb_read_frames']),
    width: Number(stream['width']),
    height: Number(stream['height']),
    fps: den ? (num ?? Number.NaN) / den : Number(num),
  };
}

/** Every packet's presentation time (s), in presentation order: the times LeRobot's decoder looks frames up by. */
export async function probeFrameTimes(ffprobe: string, path: string): Promise<number[]> {
  const { stdout } = await run(ffprobe, ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'packet=pts_time', '-of', 'csv=p=0', path], { maxBuffer: 256 * 1024 * 1024 });
  return stdout
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map(Number)
    .sort((a, b) => a - b);
}

/** The episodes of each video file of one camera, in episode order. */
export function episodesByVideoFile(camera: string, episodes: readonly EpisodeRecord[]): Map<string, EpisodeRecord[]> {
  const byFile = new Map<string, EpisodeRecord[]>();
  for (const ep of episodes) {
    const video = ep.videos[camera];
    if (video === undefined) continue;
    const list = byFile.get(video.file) ?? [];
    list.push(ep);
    byFile.set(video.file, list);
  }
  return byFile;
}

/**
 * Checks one camera's video file against the episodes in it: episodes follow each other in the
 * file (from = previous to, starting at 0), each spans length / fps, and the decoded frames are
 * exactly theirs, at the dataset's size and rate.
 */
export async function checkVideoFile(
  dir: string,
  camera: string,
  file: string,
  inFile: readonly EpisodeRecord[],
  info: DatasetInfo,
  opts: { ffprobe: string; checkVideos: boolean },
  log: ProblemLog,
): Promise<void> {
  let previousTo = 0;
  for (const ep of inFile) {
    const { from, to } = ep.videos[camera]!;
    const where = `${ep.where} (episode ${ep.episodeIndex}) columns videos/${camera}/from_timestamp,to_timestamp`;
    const span = ep.length / info.fps;
    if (!(Math.abs(from - previousTo) <= TIMESTAMP_TOLERANCE_S)) {
      log.add('video.timestamps', where, `from_timestamp is ${from}, expected ${previousTo}: episodes follow each other in ${file}`);
    } else if (!(Math.abs(to - from - span) <= TIMESTAMP_TOLERANCE_S)) {
      log.add('video.timestamps', where, `span [${from}, ${to}] is ${to - from} s, expected length ${ep.length} / fps ${info.fps} = ${span} s`);
    }
    previousTo = to;
  }
  if (!opts.checkVideos) return;

  let probe: VideoProbe;
  try {
    probe = await probeVideo(opts.ffprobe, join(dir, file));
  } catch (error) {
    log.add('files.readable', file, `ffprobe cannot read it: ${String(error)}`);
    return;
  }
  const expectedFrames = inFile.reduce((sum, ep) => sum + ep.length, 0);
  if (probe.frames !== expectedFrames) {
    const episodes = inFile.map((ep) => ep.episodeIndex).join(', ');
    log.add('video.frames', file, `decodes to ${probe.frames} frames, but its episodes (${episodes}) have ${expectedFrames}`);
  }
  const { width, height } = frameSize(info.features[camera]!);
  if (probe.width !== width || probe.height !== height) {
    log.add('video.size', file, `is ${probe.width}x${probe.height}, but features.${camera}.shape says ${width}x${height}`);
  }
  if (!(Math.abs(probe.fps - info.fps) < 1e-6)) {
    log.add('video.fps', file, `runs at ${probe.fps} fps, but info.json fps is ${info.fps}`);
  }
  // LeRobot decodes frame i of an episode at from_timestamp + i / fps and refuses a frame farther
  // than tolerance_s from it (FrameTimestampError): every frame's own time must be where the
  // episode's columns say.
  let times: number[];
  try {
    times = await probeFrameTimes(opts.ffprobe, join(dir, file));
  } catch (error) {
    log.add('files.readable', file, `ffprobe cannot read its packets: ${String(error)}`);
    return;
  }
  let before = 0;
  for (const ep of inFile) {
    const { from } = ep.videos[camera]!;
    for (let i = 0; i < ep.length; i++) {
      const t = times[before + i];
      const want = from + i / info.fps;
      if (t === undefined || !(Math.abs(t - want) <= TIMESTAMP_TOLERANCE_S)) {
        log.add('video.timestamps', file, `episode ${ep.episodeIndex} frame ${i} is at ${t ?? 'no frame'} s, expected from_timestamp ${from} + ${i} / ${info.fps} = ${want} s (within ${TIMESTAMP_TOLERANCE_S} s)`);
        return;
      }
    }
    before += ep.length;
  }
}
