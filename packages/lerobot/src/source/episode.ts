import type { CameraFrames, DatasetShape, GridEpisode } from '../types.js';
import { SourceError } from './errors.js';
import type { ManifestEpisode } from './manifest.js';
import { checkMapping, type Mapping, type TaskSource, type VectorPlan } from './mapping.js';
import { Recording } from './mcap.js';
import { concatFrames, frameSize, makeGrid, nearestFrames, readVectorSamples, resampleVector, type StreamSpan, type VectorSamples } from './resample.js';

/**
 * One downloaded recording and its manifest line on the fixed grid (see resample.ts for the grid
 * and the rules). Vectors are resampled at once (they are small); camera frames are read from the
 * MCAP as the writer iterates them, so the recording stays open until `close()` (or `await using`).
 */
export interface LoadedEpisode extends AsyncDisposable {
  episode: GridEpisode;
  /** What this episode says the dataset is; the writer checks every episode agrees. */
  shape: DatasetShape;
  close(): Promise<void>;
}

export function taskOf(source: TaskSource, line: ManifestEpisode): string {
  if ('value' in source) return source.value;
  let v: unknown;
  if (source.from === 'metadata') v = line.metadata?.[source.key];
  else v = line[source.from];
  if (v !== null && v !== undefined && v !== '') return typeof v === 'string' ? v : JSON.stringify(v);
  if (source.default !== undefined) return source.default;
  const what = source.from === 'metadata' ? `metadata.${source.key}` : source.from;
  throw new SourceError('task_missing', `episode ${line.id} has no ${what} and the mapping's task has no default`);
}

/** A recorded metadata value in its string form (as the episode filters compare it); '' when absent. */
export function metadataString(v: unknown): string {
  if (v === undefined || v === null) return '';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

export async function loadGridEpisode(mcapPath: string, line: ManifestEpisode, mapping: Mapping, opts: { checksummed?: boolean } = {}): Promise<LoadedEpisode> {
  const recording = await Recording.open(mcapPath, opts);
  try {
    return await load(recording, line, mapping);
  } catch (err) {
    await recording.close();
    throw err;
  }
}

async function load(recording: Recording, line: ManifestEpisode, mapping: Mapping): Promise<LoadedEpisode> {
  const plan = checkMapping(mapping, recording.channels);
  const task = taskOf(mapping.task, line);

  // By plan, not by key: a joined feature has one plan (and one read) per part.
  const samples = new Map<VectorPlan, VectorSamples>();
  const spans: StreamSpan[] = [];
  for (const topic of plan.vectorTopics) {
    const ofTopic = plan.vectors.filter((v) => v.topic === topic);
    // One read per topic and stamp rule (two features of one topic normally share it).
    for (const stamp of new Set(ofTopic.map((v) => v.stamp))) {
      const these = ofTopic.filter((v) => v.stamp === stamp);
      const read = await readVectorSamples(recording.messages([topic], stamp !== undefined ? { stamp } : {}), these);
      these.forEach((v, i) => samples.set(v, read[i]!));
      const times = read[0]!.timesNs;
      spans.push({ topic, kind: 'vector', firstNs: times[0], lastNs: times.at(-1) });
    }
  }
  const firstFrames = new Map<string, { width: number; height: number }>();
  /** Per camera, the last frame used (inclusive), by log time (what the reader's bounds are in). */
  const cameraEnds = new Map<string, bigint>();
  for (const cam of plan.cameras) {
    const schemaName = recording.channel(cam.topic)?.schemaName ?? '';
    const first = await recording.first(cam.topic, false, cam.stamp);
    let last = await recording.first(cam.topic, true, cam.stamp);
    if (first !== undefined && last !== undefined) {
      const f = await frameSize(schemaName, first.data, `${cam.topic} at ${first.logTimeNs} ns`);
      firstFrames.set(cam.key, f);
      // The cut-short last frame rule: a recorder that stops between two frames may write a last
      // frame of another size (the simulator's JSON recorder keeps its byte rate so). When the
      // LAST frame alone differs from the first, the camera ends at the frame before it: that one
      // is not part of the video and does not bound the grid's end. Only the last frame is so
      // forgiven; a size change anywhere else is `shape_changed` (found while reading frames).
      const l = await frameSize(schemaName, last.data, `${cam.topic} at ${last.logTimeNs} ns`);
      if (last !== first && (l.width !== f.width || l.height !== f.height)) {
        const tail = recording.messages([cam.topic], { reverse: true, ...(cam.stamp !== undefined ? { stamp: cam.stamp } : {}) });
        await tail.next();
        const previous = await tail.next();
        await tail.return();
        last = previous.done === true ? first : previous.value;
      }
      cameraEnds.set(cam.key, last.logTimeNs);
    }
    spans.push({ topic: cam.topic, kind: 'camera', firstNs: first?.timeNs ?? first?.logTimeNs, lastNs: last?.timeNs ?? last?.logTimeNs });
  }
  const grid = makeGrid(mapping.fps, spans);

  const vectors: Record<string, Float32Array> = {};
  const shapeVectors: DatasetShape['vectors'] = {};
  for (const key of new Set(plan.vectors.map((v) => v.key))) {
    // One part for a one-topic feature; a joined one's parts, each on the grid by itself, then side by side.
    const parts = plan.vectors.filter((v) => v.key === key).map((v) => ({ v, s: samples.get(v)! }));
    const onGrid = parts.map(({ v, s }) => resampleVector(s, grid, v.rule, { offsetFrames: v.offsetFrames, maxStalenessNs: v.maxStalenessNs }));
    const dims = parts.map(({ s }) => s.dim);
    vectors[key] = onGrid.length === 1 ? onGrid[0]! : concatFrames(onGrid, dims, grid.length);
    shapeVectors[key] = { shape: [dims.reduce((a, b) => a + b, 0)], names: parts.flatMap(({ s }) => s.names) };
  }

  const cameras: Record<string, CameraFrames> = {};
  const shapeCameras: DatasetShape['cameras'] = {};
  for (const cam of plan.cameras) {
    const size = firstFrames.get(cam.key)!;
    let taken = false;
    cameras[cam.key] = {
      ...size,
      frames: {
        [Symbol.asyncIterator]: () => {
          if (taken) throw new SourceError('io', `the frames of ${cam.key} are read once`);
          taken = true;
          const read = { endNs: cameraEnds.get(cam.key)!, ...(cam.stamp !== undefined ? { stamp: cam.stamp } : {}) };
          return nearestFrames(recording.messages([cam.topic], read), grid, size, cam.topic, recording.channel(cam.topic)?.schemaName ?? '', { key: cam.key, maxStalenessNs: cam.maxStalenessNs });
        },
      },
    };
    shapeCameras[cam.key] = size;
  }

  const episode: GridEpisode = {
    episodeId: line.id,
    task,
    length: grid.length,
    vectors,
    success: line.outcome === 'success',
    cameras,
    metadata: Object.fromEntries(mapping.metadata.map((k) => [k, metadataString(line.metadata?.[k])])),
  };
  const shape: DatasetShape = {
    fps: mapping.fps,
    robotType: mapping.robot_type,
    vectors: shapeVectors,
    cameras: shapeCameras,
    metadataKeys: [...mapping.metadata],
  };
  const close = () => recording.close();
  return { episode, shape, close, [Symbol.asyncDispose]: close };
}
