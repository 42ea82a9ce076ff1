import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { iso, type EpisodeOutcome } from '@fleet/protocol';
import { listDataFiles } from './recording/finalize.js';
import type { AgentStore, EpisodeRow, RecordingRow, ReplicaRow } from './store/types.js';
import type { UploadProgressView } from './sync/progress.js';
import { bytesAtDestination } from './sync/uploader.js';

/**
 * `fleet-agent episodes list|show`: where each episode's files are on this robot and how far
 * each of its replicas got. Built from the agent's store and the files on disk, with the
 * uploader's live figures for replicas uploading now.
 */

/** Where an episode is on this robot. */
export type LocalEpisodeState =
  /** The recorder is writing its files. */
  | 'recording'
  /** Ended; its files are being closed and checksummed. */
  | 'finalizing'
  /** Finalized: manifest and facts written, files on disk. */
  | 'finalized'
  /** Every destination verified it and retention deleted its data files. */
  | 'pruned';

export interface EpisodeFileView {
  /** Relative to the episode directory. */
  path: string;
  /** Absolute. */
  abs_path: string;
  /** Size on disk now; null when the file is not there (pruned or missing). */
  size_bytes: number | null;
  /** As recorded in the manifest; null while recording. */
  sha256: string | null;
}

export interface EpisodeReplicaView {
  destination_id: string;
  /** The replica's local state: `assigned`, `granted`, `syncing`, `synced`, `verified`. */
  state: string;
  /** True while an attempt runs. */
  active: boolean;
  bytes_sent: number;
  bytes_total: number;
  last_error: string | null;
  note: string | null;
  /** When the next attempt is due (ISO); null when running or finished. */
  next_attempt_at: string | null;
}

export interface EpisodeView {
  id: string;
  state: LocalEpisodeState;
  outcome: EpisodeOutcome | null;
  /** Finalized at start-up after the agent died while recording. */
  interrupted: boolean;
  started_at: string;
  ended_at: string | null;
  finalized_at: string | null;
  /** Absolute path of the episode directory. */
  dir: string;
  files: EpisodeFileView[];
  /** Bytes of the recorded files (the manifest's total once finalized). */
  total_bytes: number;
  /** When retention deletes the local files (every destination verified); null while not due. */
  prune_due_at: string | null;
  pruned_at: string | null;
  /** When files were first found missing before any prune. */
  local_missing_at: string | null;
  sync: EpisodeReplicaView[];
}

/** What the views are built from; the daemon passes its store and uploader. */
export interface EpisodeViewSource {
  store: AgentStore;
  dataDir: string;
  /** The uploader's live rows (replicas with work ahead), or nothing when sync is off. */
  uploads?: () => Promise<UploadProgressView[]>;
}

const isoOrNull = (ms: number | null | undefined) => (ms === null || ms === undefined ? null : iso(ms));

async function sizeOf(path: string): Promise<number | null> {
  return stat(path).then(
    (s) => (s.isFile() ? s.size : null),
    () => null,
  );
}

async function recordingView(dataDir: string, r: RecordingRow): Promise<EpisodeView> {
  const dir = join(dataDir, r.dir);
  const paths = await listDataFiles(dir).catch(() => [] as string[]);
  const files: EpisodeFileView[] = [];
  for (const path of paths) {
    const abs = join(dir, ...path.split('/'));
    files.push({ path, abs_path: abs, size_bytes: await sizeOf(abs), sha256: null });
  }
  return {
    id: r.episodeId,
    state: r.state,
    outcome: r.outcome,
    interrupted: false,
    started_at: iso(r.startedAt),
    ended_at: isoOrNull(r.endedAt),
    finalized_at: null,
    dir,
    files,
    total_bytes: files.reduce((n, f) => n + (f.size_bytes ?? 0), 0),
    prune_due_at: null,
    pruned_at: null,
    local_missing_at: null,
    sync: [],
  };
}

async function finalizedView(source: EpisodeViewSource, row: EpisodeRow, replicas: readonly ReplicaRow[], live: ReadonlyMap<string, UploadProgressView>): Promise<EpisodeView> {
  const dir = join(source.dataDir, row.dir);
  const files: EpisodeFileView[] = [];
  for (const f of row.manifest.files) {
    const abs = join(dir, ...f.path.split('/'));
    files.push({ path: f.path, abs_path: abs, size_bytes: await sizeOf(abs), sha256: f.sha256 });
  }
  const local = await source.store.sync.localCopy(row.id);
  const sync: EpisodeReplicaView[] = [];
  for (const r of replicas) {
    const now = live.get(r.destinationId);
    sync.push({
      destination_id: r.destinationId,
      state: r.state,
      active: now?.active ?? false,
      bytes_sent: now ? now.bytes_sent : bytesAtDestination(await source.store.sync.files(row.id, r.destinationId), row),
      bytes_total: row.manifest.total_bytes,
      last_error: r.lastError,
      note: r.note,
      next_attempt_at: now ? now.next_attempt_at : r.nextAttemptAt === null ? null : iso(r.nextAttemptAt),
    });
  }
  return {
    id: row.id,
    state: local?.prunedAt ? 'pruned' : 'finalized',
    outcome: row.outcome,
    interrupted: row.interrupted,
    started_at: row.facts.started_at,
    ended_at: row.facts.ended_at,
    finalized_at: iso(row.finalizedAt),
    dir,
    files,
    total_bytes: row.manifest.total_bytes,
    prune_due_at: isoOrNull(local?.pruneDueAt),
    pruned_at: isoOrNull(local?.prunedAt),
    local_missing_at: isoOrNull(local?.localMissingAt),
    sync,
  };
}

async function liveUploads(source: EpisodeViewSource, episodeId?: string): Promise<Map<string, Map<string, UploadProgressView>>> {
  const out = new Map<string, Map<string, UploadProgressView>>();
  for (const u of (await source.uploads?.()) ?? []) {
    if (episodeId !== undefined && u.episode_id !== episodeId) continue;
    const m = out.get(u.episode_id) ?? new Map<string, UploadProgressView>();
    m.set(u.destination_id, u);
    out.set(u.episode_id, m);
  }
  return out;
}

/** The newest `limit` episodes, newest first: the one recording now (if any), then finalized ones. */
export async function listEpisodeViews(source: EpisodeViewSource, limit: number): Promise<EpisodeView[]> {
  const { store } = source;
  const views: EpisodeView[] = [];
  const current = await store.recording.get();
  if (current) views.push(await recordingView(source.dataDir, current));
  const room = limit - views.length;
  if (room <= 0) return views;
  const ids = (await store.episodes.ids()).slice(-room).reverse();
  const wanted = new Set(ids);
  const replicas = new Map<string, ReplicaRow[]>();
  for (const r of await store.sync.list()) if (wanted.has(r.episodeId)) replicas.set(r.episodeId, [...(replicas.get(r.episodeId) ?? []), r]);
  const live = await liveUploads(source);
  for (const id of ids) {
    const row = await store.episodes.get(id);
    if (row) views.push(await finalizedView(source, row, replicas.get(id) ?? [], live.get(id) ?? new Map()));
  }
  return views;
}

/** One episode by id, or undefined when this robot has none by that id. */
export async function showEpisodeView(source: EpisodeViewSource, id: string): Promise<EpisodeView | undefined> {
  const { store } = source;
  const current = await store.recording.get();
  if (current?.episodeId === id) return recordingView(source.dataDir, current);
  const row = await store.episodes.get(id);
  if (!row) return undefined;
  const replicas = (await store.sync.list()).filter((r) => r.episodeId === id);
  return finalizedView(source, row, replicas, (await liveUploads(source, id)).get(id) ?? new Map());
}
