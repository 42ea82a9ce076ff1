import { once } from 'node:events';
import { createWriteStream, existsSync, readFileSync, renameSync, rmSync, truncateSync, writeFileSync, statSync } from 'node:fs';
import type { Writable } from 'node:stream';
import canonicalize from 'canonicalize';
import type { FleetClient } from '../client.js';
import type { EpisodeFilters } from '../types.js';
import { UsageError } from './errors.js';

/**
 * The state kept next to an export (`<file>.cursor`) while it runs: the cursor of the next page
 * and the length of the file when the last complete page was written. `--resume` cuts the file
 * back to that length (a page half written when the process died is written again) and asks for
 * that cursor; the filters must be the same. The state file is removed once the export is complete.
 */
interface ExportState {
  version: 1;
  filters: EpisodeFilters;
  page_size: number | null;
  cursor: string;
  bytes: number;
  episodes: number;
}

export function statePath(out: string): string {
  return `${out}.cursor`;
}

function readState(path: string): ExportState {
  let v: Partial<ExportState>;
  try {
    v = JSON.parse(readFileSync(path, 'utf8')) as Partial<ExportState>;
  } catch {
    throw new UsageError(`cannot read ${path}: nothing to resume (run without --resume to start over)`);
  }
  if (v.version !== 1 || typeof v.cursor !== 'string' || typeof v.bytes !== 'number' || typeof v.episodes !== 'number' || typeof v.filters !== 'object') {
    throw new UsageError(`${path} is not an export state file`);
  }
  return v as ExportState;
}

function writeState(path: string, state: ExportState): void {
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(state)}\n`);
  renameSync(tmp, path);
}

/**
 * Whether two filter sets are the same, whatever their key order: equal RFC 8785 forms. Filters
 * from the command line are strings; a state file edited into something that is not I-JSON
 * (`1e400`, a lone surrogate) matches none of them, as it did not before.
 */
function sameFilters(a: EpisodeFilters, b: EpisodeFilters): boolean {
  try {
    return canonicalize(a) === canonicalize(b);
  } catch {
    return false;
  }
}

/** A one-line counter redrawn in place on a terminal (the total is not known in advance). */
class ProgressLine {
  private last = 0;
  private readonly started = Date.now();
  constructor(private readonly stream: (Writable & { isTTY?: boolean }) | null) {}
  update(episodes: number, bytes: number, force = false): void {
    if (!this.stream) return;
    const now = Date.now();
    if (!force && now - this.last < 100) return;
    this.last = now;
    const secs = Math.max(0.001, (now - this.started) / 1000);
    const mb = (bytes / 1e6).toFixed(1);
    const width = 24;
    const spin = Math.floor(now / 120) % width;
    const bar = Array.from({ length: width }, (_, i) => (force ? '=' : i === spin ? '>' : '-')).join('');
    this.stream.write(`\r[${bar}] ${episodes.toLocaleString('en')} episodes, ${mb} MB, ${Math.round(episodes / secs).toLocaleString('en')}/s `);
  }
  end(): void {
    this.stream?.write('\n');
  }
}

export interface ExportResult {
  /** The file written, or null for stdout. */
  out: string | null;
  episodes: number;
  bytes: number;
  resumed: boolean;
}

/** Streams every matching episode into `sink` (stdout: not resumable, no state file), page by page. */
async function exportToStream(
  client: FleetClient,
  sink: Writable,
  args: { filters: EpisodeFilters; pageSize?: number; progress: (Writable & { isTTY?: boolean }) | null },
): Promise<ExportResult> {
  const progress = new ProgressLine(args.progress);
  let cursor: string | undefined;
  let bytes = 0;
  let episodes = 0;
  for (;;) {
    const page = await client.episodes.exportPage(args.filters, { ...(cursor !== undefined ? { cursor } : {}), ...(args.pageSize !== undefined ? { limit: args.pageSize } : {}) });
    for await (const episode of page.lines) {
      const line = `${JSON.stringify(episode)}\n`;
      if (!sink.write(line)) await once(sink, 'drain');
      bytes += Buffer.byteLength(line);
      episodes++;
      progress.update(episodes, bytes);
    }
    if (!page.nextCursor) break;
    cursor = page.nextCursor;
  }
  progress.update(episodes, bytes, true);
  progress.end();
  return { out: null, episodes, bytes, resumed: false };
}

/**
 * Streams every matching episode as NDJSON, page by page: into `out`, resumable by cursor, or
 * without `out` to `stdout`.
 */
export async function exportEpisodes(
  client: FleetClient,
  args: { out?: string; stdout?: Writable; filters: EpisodeFilters; pageSize?: number; resume: boolean; progress: (Writable & { isTTY?: boolean }) | null },
): Promise<ExportResult> {
  if (args.out === undefined) {
    if (args.resume) throw new UsageError('--resume needs --out: an export to stdout keeps no cursor to resume from');
    if (!args.stdout) throw new UsageError('export needs --out FILE or stdout');
    return exportToStream(client, args.stdout, args);
  }
  const state = statePath(args.out);
  let cursor: string | undefined;
  let bytes = 0;
  let episodes = 0;
  if (args.resume) {
    const s = readState(state);
    if (!sameFilters(s.filters, args.filters)) throw new UsageError(`the filters differ from the interrupted export's (${JSON.stringify(s.filters).slice(0, 200)})`);
    if (!existsSync(args.out) || statSync(args.out).size < s.bytes) throw new UsageError(`${args.out} is shorter than ${state} says: run without --resume to start over`);
    truncateSync(args.out, s.bytes);
    ({ cursor, bytes, episodes } = s);
  } else {
    rmSync(state, { force: true });
  }
  const file = createWriteStream(args.out, { flags: args.resume ? 'a' : 'w' });
  const progress = new ProgressLine(args.progress);
  const write = async (chunk: string) => {
    if (!file.write(chunk)) await once(file, 'drain');
  };
  try {
    for (;;) {
      const page = await client.episodes.exportPage(args.filters, { ...(cursor !== undefined ? { cursor } : {}), ...(args.pageSize !== undefined ? { limit: args.pageSize } : {}) });
      for await (const episode of page.lines) {
        const line = `${JSON.stringify(episode)}\n`;
        await write(line);
        bytes += Buffer.byteLength(line);
        episodes++;
        progress.update(episodes, bytes);
      }
      // The page is on disk before the cursor that skips it is.
      await new Promise<void>((resolve, reject) => file.write('', (err) => (err ? reject(err) : resolve())));
      if (!page.nextCursor) break;
      cursor = page.nextCursor;
      writeState(state, { version: 1, filters: args.filters, page_size: args.pageSize ?? null, cursor, bytes, episodes });
    }
  } finally {
    file.end();
    await once(file, 'close');
  }
  rmSync(state, { force: true });
  progress.update(episodes, bytes, true);
  progress.end();
  return { out: args.out, episodes, bytes, resumed: args.resume };
}
