import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { iso } from '@fleet/protocol';
import type { Logger } from 'pino';
import { EPISODE_ID_PATTERN } from '../ids.js';
import type { AgentStore, EpisodeRow, RecordingRow } from '../store/types.js';
import type { EpisodeFacts, EpisodeManifest, ManifestFile, SubtaskStep } from '../rules/episode-facts.js';
import { EPISODE_META_FILES, type RecordedFiles, type Recorder, type RecordingHandle } from './recorder.js';
import { segmentsFromSteps } from './segments.js';

export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 1024 * 1024 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** The manifest of `files` (relative to `dir`), in path order. */
export async function buildManifest(dir: string, files: readonly string[]): Promise<EpisodeManifest> {
  const entries: ManifestFile[] = [];
  for (const path of [...new Set(files)].sort()) {
    const abs = join(dir, ...path.split('/'));
    const s = await stat(abs);
    entries.push({ path, size_bytes: s.size, sha256: await sha256File(abs) });
  }
  return { files: entries, total_bytes: entries.reduce((n, f) => n + f.size_bytes, 0) };
}

/** Every regular file under `dir` except the agent's own metadata files, relative and `/`-separated. */
export async function listDataFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const rel = relative(dir, join(entry.parentPath, entry.name)).split(sep).join('/');
    if ((EPISODE_META_FILES as readonly string[]).includes(rel) || rel.includes('.tmp-')) continue;
    out.push(rel);
  }
  return out.sort();
}

/** Deletes every recorded data file in `dir`, keeping the directory (discard). */
export async function deleteDataFiles(dir: string): Promise<void> {
  for (const rel of await listDataFiles(dir)) await rm(join(dir, ...rel.split('/')), { force: true });
}

/** The recorded facts of a recording that has ended. */
export function buildFacts(args: {
  robotId: string;
  recording: RecordingRow & { outcome: NonNullable<RecordingRow['outcome']>; endedAt: number };
  steps: readonly SubtaskStep[];
  messageCount: number | null;
  bagSizeBytes: number;
  metadata: Record<string, unknown>;
}): EpisodeFacts {
  const r = args.recording;
  const c = r.context;
  const endedAt = Math.max(r.endedAt, r.startedAt);
  return {
    id: r.episodeId,
    robot_id: args.robotId,
    recording_session_id: r.recordingSessionId,
    episode_seq: r.episodeSeq,
    session_name: r.sessionName,
    task_id: c.task_id,
    task_name: c.task_name,
    subtask_id: c.subtask_id,
    operator_id: c.operator_id,
    operator_name: c.operator_name,
    control_mode: c.control_mode,
    policy_version_id: c.policy_version_id,
    eval_id: c.eval_id,
    outcome: r.outcome,
    started_at: iso(r.startedAt),
    ended_at: iso(endedAt),
    duration_s: (endedAt - r.startedAt) / 1000,
    message_count: args.messageCount,
    bag_size_bytes: args.bagSizeBytes,
    metadata: args.metadata,
    segments: segmentsFromSteps(args.steps, r.startedAt, endedAt),
  };
}

/**
 * The recording's own start and end (`RecordedFiles.startedAt`/`endedAt`, e.g. an imported MCAP's
 * statistics) in place of the verbs' clock. A subtask step taken at or before the episode's begin
 * (the context it started with) moves to the recording's start, so it still covers the recording.
 */
export function withRecordedTimes<R extends { startedAt: number; endedAt: number }>(
  recording: R,
  steps: readonly SubtaskStep[],
  recorded: Pick<RecordedFiles, 'startedAt' | 'endedAt'>,
): { recording: R; steps: SubtaskStep[] } {
  if (recorded.startedAt === undefined && recorded.endedAt === undefined) return { recording, steps: [...steps] };
  const startedAt = recorded.startedAt ?? Math.min(recording.startedAt, recorded.endedAt!);
  const endedAt = Math.max(recorded.endedAt ?? recording.endedAt, startedAt);
  return {
    recording: { ...recording, startedAt, endedAt },
    steps: steps.map((s) => (s.at <= recording.startedAt ? { ...s, at: startedAt } : s)),
  };
}

/** Writes `name` in `dir` by way of a temporary file, fsync and rename: never half a file. */
export async function writeJsonAtomic(dir: string, name: string, value: unknown): Promise<void> {
  const tmp = join(dir, `${name}.tmp-${process.pid}`);
  const fh = await open(tmp, 'w', 0o644);
  try {
    await fh.writeFile(`${JSON.stringify(value, null, 2)}\n`);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, join(dir, name));
}

/**
 * Checksums the recorded files, writes `manifest.json` and `episode.json` into the episode
 * directory and returns the finished episode row. Safe to run again after a failure: it
 * rewrites both files from the same inputs.
 */
export async function finalizeEpisode(args: {
  dataDir: string;
  robotId: string;
  recording: RecordingRow & { outcome: NonNullable<RecordingRow['outcome']>; endedAt: number };
  steps: readonly SubtaskStep[];
  files: readonly string[];
  messageCount: number | null;
  metadata: Record<string, unknown>;
  interrupted: boolean;
  finalizedAt: number;
}): Promise<EpisodeRow> {
  const dir = join(args.dataDir, args.recording.dir);
  const manifest = await buildManifest(dir, args.files);
  const facts = buildFacts({
    robotId: args.robotId,
    recording: args.recording,
    steps: args.steps,
    messageCount: args.messageCount,
    bagSizeBytes: manifest.total_bytes,
    metadata: args.metadata,
  });
  await writeJsonAtomic(dir, 'manifest.json', manifest);
  await writeJsonAtomic(dir, 'episode.json', facts);
  return {
    id: facts.id,
    recordingSessionId: facts.recording_session_id,
    episodeSeq: facts.episode_seq,
    outcome: facts.outcome,
    facts,
    manifest,
    finalizedAt: args.finalizedAt,
    interrupted: args.interrupted,
    dir: args.recording.dir,
  };
}

/**
 * Ends the recorder's work on an episode: a discard aborts it and deletes every recorded file; an
 * ending closes the files; a recording without a handle (left by a crash) is recovered by the
 * recorder, or taken as the files that are there.
 */
export async function closeRecordingFiles(args: {
  handle: RecordingHandle | undefined;
  discard: boolean;
  dir: string;
  recorder: Recorder;
  logger: Logger;
  episodeId: string;
}): Promise<RecordedFiles> {
  const { handle, dir, logger } = args;
  if (args.discard) {
    const messageCount = handle ? handle.stats().messageCount : null;
    await handle?.abort().catch((err: unknown) => logger.error({ err, episode_id: args.episodeId }, 'recorder did not abort cleanly'));
    await mkdir(dir, { recursive: true });
    await deleteDataFiles(dir);
    return { files: [], messageCount };
  }
  if (handle) {
    try {
      return await handle.stop();
    } catch (err) {
      logger.error({ err, episode_id: args.episodeId }, 'recorder did not stop cleanly; keeping its files as they are');
      return { files: await listDataFiles(dir), messageCount: handle.stats().messageCount };
    }
  }
  await mkdir(dir, { recursive: true });
  const recovered = args.recorder.recover ? await args.recorder.recover(dir).catch(() => undefined) : undefined;
  return recovered ?? { files: await listDataFiles(dir), messageCount: null };
}

/**
 * Deletes episode directories that no row knows: left by a crash between the recorder's start
 * and the commit of the recording, so nothing was ever acknowledged for them. A directory with
 * an `episode.json` is never touched.
 */
export async function removeOrphanDirectories(args: { dataDir: string; store: AgentStore; logger: Logger; currentEpisodeId: string | undefined }): Promise<void> {
  const root = join(args.dataDir, 'episodes');
  const names = await readdir(root).catch(() => [] as string[]);
  if (names.length === 0) return;
  const known = new Set(await args.store.episodes.ids());
  for (const name of names) {
    if (!EPISODE_ID_PATTERN.test(name) || known.has(name) || name === args.currentEpisodeId) continue;
    const hasFacts = await stat(join(root, name, 'episode.json')).then(
      () => true,
      () => false,
    );
    if (hasFacts) continue;
    args.logger.warn({ episode_id: name }, 'removing an episode directory no recording owns');
    await rm(join(root, name), { recursive: true, force: true });
  }
}
