import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Episode, EpisodeWithLocations, Segment } from '@fleet/protocol';
import { startCloud, type CloudProcess, type StartCloudOptions } from './cloud.js';
import type { SpawnedProcess } from './process.js';
import { runAgentCli, spawnAgent, type AgentProcess } from './robots.js';
import { ControlClient } from '../../agent/src/control/client.js';
import { waitFor } from './wait.js';

/**
 * `fleet-agent start` flags for the episode tests: a small recorder rate, and a short ack
 * timeout so a report the cloud never saw (published while its link was not yet subscribed
 * after a restart) is sent again quickly; failure bounds stay generous.
 */
export const AGENT_ARGS = ['--bytes-per-second', '4096', '--chunk-interval-ms', '50', '--outbox-ack-timeout-ms', '2000'] as const;

/** What `fleet-agent status` says about the outbox. */
export interface OutboxCounts {
  pending: number;
  refused: number;
}

/** The agent's status through its control socket (works while the cloud is away). */
export async function agentStatus(dataDir: string): Promise<{ recording_state: string; connected: boolean; outbox: OutboxCounts; robot_id: string }> {
  const r = await runAgentCli(['status', '--json', '--data-dir', dataDir]);
  if (r.code !== 0) throw new Error(`fleet-agent status exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as { recording_state: string; connected: boolean; outbox: OutboxCounts; robot_id: string };
}

/** `fleet-agent <args> --data-dir D`, parsed; throws unless it exits 0. */
export async function agentControl(dataDir: string, args: readonly string[]): Promise<Record<string, unknown>> {
  const r = await runAgentCli([...args, '--data-dir', dataDir]);
  if (r.code !== 0) throw new Error(`fleet-agent ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

/** Waits until the agent is idle again (its last episode finalized, its report enqueued). */
export async function waitIdle(dataDir: string): Promise<void> {
  await waitFor(async () => ((await agentStatus(dataDir)).recording_state === 'idle' ? true : undefined), { description: `${dataDir} to be idle` });
}

/**
 * Records one episode through the local control surface (`fleet-agent episode start`, then
 * `finish`/`fail`/`discard`; `between` runs while it records) and waits until it is finalized.
 * Returns its id.
 */
export async function recordEpisode(dataDir: string, end: 'finish' | 'fail' | 'discard' = 'finish', between?: (episodeId: string) => Promise<void>): Promise<string> {
  const started = await agentControl(dataDir, ['episode', 'start']);
  await between?.(String(started.episode_id));
  await agentControl(dataDir, ['episode', end]);
  await waitIdle(dataDir);
  return String(started.episode_id);
}

/**
 * Records one short episode: start and finish go over one control-socket connection from this
 * process, milliseconds apart, instead of two `fleet-agent` processes whose start-up on a loaded
 * machine can take seconds (and let the recording grow past a size a test relies on).
 */
export async function recordShortEpisode(dataDir: string): Promise<string> {
  const client = await ControlClient.connect(join(dataDir, 'agent.sock'));
  let id: string;
  try {
    id = String((await client.episode('start')).episode_id);
    await client.episode('finish');
  } finally {
    client.close();
  }
  await waitIdle(dataDir);
  return id;
}

/** Bytes of the files under `dir`, in subdirectories too (a ROS 2 recording is a `bag/` directory). */
async function dirBytes(dir: string): Promise<number> {
  let n = 0;
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => [])) {
    if (entry.isFile()) n += (await stat(join(entry.parentPath, entry.name)).catch(() => ({ size: 0 }))).size;
  }
  return n;
}

/** Records one episode of at least `minBytes` (waiting on the recording's size, not on a clock). */
export function recordAtLeast(dataDir: string, minBytes: number): Promise<string> {
  return recordEpisode(dataDir, 'finish', async (id) => {
    await waitFor(async () => ((await dirBytes(join(dataDir, 'episodes', id))) >= minBytes ? true : undefined), {
      timeoutMs: 60_000,
      description: `episode ${id} to reach ${minBytes} bytes`,
    });
  });
}

/** Waits for the agent's outbox to be empty (everything acknowledged, nothing refused). */
export async function waitOutboxEmpty(dataDir: string, timeoutMs = 30_000): Promise<void> {
  let last: OutboxCounts | undefined;
  await waitFor(
    async () => {
      last = (await agentStatus(dataDir)).outbox;
      return last.pending === 0 ? true : undefined;
    },
    { timeoutMs, description: () => `the outbox of ${dataDir} to drain (last: ${JSON.stringify(last)})` },
  );
  if (last?.refused !== 0) throw new Error(`the cloud refused reports of ${dataDir}: ${JSON.stringify(last)}`);
}

async function getJson<T>(cloud: CloudProcess, path: string): Promise<{ status: number; body: T }> {
  const res = await cloud.fetch(path);
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as T };
}

/** Every episode matching `query` (e.g. `robot_id=…`), through every page of `GET /v1/episodes`. */
export async function listEpisodes(cloud: CloudProcess, query = ''): Promise<Episode[]> {
  const out: Episode[] = [];
  let cursor: string | null = null;
  do {
    const q: string = [query, 'limit=100', cursor === null ? '' : `cursor=${encodeURIComponent(cursor)}`].filter(Boolean).join('&');
    const r = await getJson<{ episodes: Episode[]; cursor: string | null }>(cloud, `/v1/episodes?${q}`);
    if (r.status !== 200) throw new Error(`GET /v1/episodes?${q} answered ${r.status}: ${JSON.stringify(r.body)}`);
    out.push(...r.body.episodes);
    cursor = r.body.cursor;
  } while (cursor !== null);
  return out;
}

/** `GET /v1/episodes/{id}`; undefined on 404. */
export async function getEpisode(cloud: CloudProcess, id: string): Promise<Episode | undefined> {
  const r = await getJson<Episode>(cloud, `/v1/episodes/${id}`);
  if (r.status === 404) return undefined;
  if (r.status !== 200) throw new Error(`GET /v1/episodes/${id} answered ${r.status}: ${JSON.stringify(r.body)}`);
  return r.body;
}

export async function getSegments(cloud: CloudProcess, id: string): Promise<Segment[]> {
  const r = await getJson<{ segments: Segment[] }>(cloud, `/v1/episodes/${id}/segments`);
  if (r.status !== 200) throw new Error(`GET /v1/episodes/${id}/segments answered ${r.status}: ${JSON.stringify(r.body)}`);
  return r.body.segments;
}

/** Every row of `GET /v1/episodes/export?query`, following `X-Next-Cursor`. */
export async function exportEpisodes(cloud: CloudProcess, query = ''): Promise<EpisodeWithLocations[]> {
  const out: EpisodeWithLocations[] = [];
  let cursor: string | null = null;
  do {
    const q: string = [query, cursor === null ? '' : `cursor=${encodeURIComponent(cursor)}`].filter(Boolean).join('&');
    const res = await cloud.fetch(`/v1/episodes/export?${q}`);
    const text = await res.text();
    if (res.status !== 200) throw new Error(`GET /v1/episodes/export?${q} answered ${res.status}: ${text}`);
    for (const line of text.split('\n')) if (line) out.push(JSON.parse(line) as EpisodeWithLocations);
    cursor = res.headers.get('x-next-cursor');
  } while (cursor !== null);
  return out;
}

/**
 * Waits until every id in `ids` is listed, then returns how many rows each id has (over the whole
 * index, so a duplicate shows as 2).
 */
export async function waitForIndexed(cloud: CloudProcess, ids: readonly string[], timeoutMs = 60_000): Promise<Map<string, number>> {
  let missing: string[] = [...ids];
  return waitFor(
    async () => {
      const counts = new Map<string, number>();
      for (const e of await listEpisodes(cloud)) counts.set(e.id, (counts.get(e.id) ?? 0) + 1);
      missing = ids.filter((id) => !counts.has(id));
      return missing.length === 0 ? counts : undefined;
    },
    { timeoutMs, intervalMs: 200, description: () => `${ids.length} episodes in the index (missing: ${missing.join(', ')})` },
  );
}

/** The recorded facts and manifest the agent wrote into the episode directory. */
export async function episodeFiles(dataDir: string, id: string): Promise<{ facts: Record<string, unknown>; manifest: { files: { path: string; size_bytes: number; sha256: string }[]; total_bytes: number } }> {
  const dir = join(dataDir, 'episodes', id);
  return {
    facts: JSON.parse(await readFile(join(dir, 'episode.json'), 'utf8')) as Record<string, unknown>,
    manifest: JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as { files: { path: string; size_bytes: number; sha256: string }[]; total_bytes: number },
  };
}

/** The ports a running cloud listens on, to start the next one on the same ones. */
export function portsOf(cloud: CloudProcess): { http: string; mqtt: string } {
  return { http: new URL(cloud.http).port, mqtt: new URL(cloud.mqtt).port };
}

/** `fleet-cloud serve` on `dataDir` and the given ports (a restart of the same cloud). */
export function restartCloud(dataDir: string, ports: { http: string; mqtt: string }, opts: StartCloudOptions = {}): Promise<CloudProcess> {
  return startCloud({ ...opts, dataDir, args: [...(opts.args ?? []), '--http-port', ports.http, '--mqtt-port', ports.mqtt] });
}

/**
 * `fleet-agent start` on an already enrolled data directory that does not wait for the cloud
 * (it may be down). Dispose it to stop it.
 */
export async function startOfflineAgent(dataDir: string, opts: { logLevel?: string } = {}): Promise<SpawnedProcess> {
  const proc = await spawnAgent(dataDir, { args: AGENT_ARGS, ...(opts.logLevel ? { logLevel: opts.logLevel } : {}) });
  // The control socket answers once the agent started.
  await waitFor(async () => ((await agentStatus(dataDir)).robot_id ? true : undefined), { description: `the agent on ${dataDir} to answer` });
  return proc;
}

/** Reconnect attempts the agent has logged (needs `--log-level debug`). */
export function reconnectAttempts(agent: Pick<AgentProcess, 'process'> | SpawnedProcess): number {
  const proc = 'process' in agent ? agent.process : agent;
  return proc.stderrLines.filter((l) => l.includes('"mqtt reconnect scheduled"')).length;
}
