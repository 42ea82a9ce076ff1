import { z } from 'zod';
import { SourceError } from './errors.js';

/**
 * The lines of a dataset snapshot's manifest (`GET /v1/datasets/{id}/manifest`, NDJSON): a header,
 * then one episode per line. Only the fields the export uses are checked; the rest pass through,
 * so a newer cloud adding fields never breaks an older exporter.
 */

const Id = z.string().min(1).max(128);
const Text = z.string().max(1024);
const IsoTime = z.iso.datetime({ offset: true });

export const ManifestHeaderSchema = z.looseObject({
  dataset_id: Id,
  name: z.string().min(1).max(128),
  filter: z.record(z.string().max(256), z.unknown()),
  snapshot_at: IsoTime,
  episode_count: z.number().int().nonnegative(),
});
export type ManifestHeader = z.infer<typeof ManifestHeaderSchema>;

/** A path inside the episode: relative, `/`-separated, no `..` (as the robot's manifest has it). */
const RelativePath = z
  .string()
  .min(1)
  .max(1024)
  .refine((p) => !p.startsWith('/') && !p.includes('\\') && !p.split('/').some((s) => s === '..' || s === '.' || s === ''), 'must be a relative path inside the episode');

export const ManifestFileSchema = z.looseObject({
  path: RelativePath,
  size_bytes: z.number().int().nonnegative(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex digits'),
});
export type ManifestFile = z.infer<typeof ManifestFileSchema>;

export const ManifestLocationSchema = z.looseObject({
  destination_id: Id,
  /** `granted`, `syncing`, `synced` or `verified`; kept open so a new state is not a parse error. */
  state: z.string().min(1).max(64),
  /** The episode's key prefix at the destination (files are at `object_key + path`); null until granted. */
  object_key: z.string().max(1024).nullable(),
  grant_id: z.string().max(128),
});
export type ManifestLocation = z.infer<typeof ManifestLocationSchema>;

export const ManifestEpisodeSchema = z.looseObject({
  id: Id,
  robot_id: Id,
  task_id: Text.nullable(),
  task_name: Text.nullable().optional(),
  /** `success`, `failure` or `discarded`; only `success` matters to the export. */
  outcome: z.string().min(1).max(64),
  metadata: z.record(z.string(), z.unknown()).nullable(),
  started_at: IsoTime,
  ended_at: IsoTime.nullable(),
  files: z.array(ManifestFileSchema).max(10_000),
  locations: z.array(ManifestLocationSchema).max(1000),
});
export type ManifestEpisode = z.infer<typeof ManifestEpisodeSchema>;

export type ManifestLine = { kind: 'header'; header: ManifestHeader } | { kind: 'episode'; episode: ManifestEpisode };

/** Longest line accepted: an episode with its metadata, files and locations stays far below. */
export const MAX_MANIFEST_LINE_CHARS = 4 * 1024 * 1024;

function issues(err: z.ZodError): string {
  return err.issues
    .slice(0, 5)
    .map((i) => `${i.path.length > 0 ? i.path.join('.') : '(line)'}: ${i.message}`)
    .join('; ');
}

/**
 * One manifest line (1-based `lineNumber` for the message). A line with `dataset_id` and no `id`
 * is the header; anything else must be an episode. Throws `manifest_invalid` naming the line.
 */
export function parseManifestLine(text: string, lineNumber: number): ManifestLine {
  const where = `manifest line ${lineNumber}`;
  if (text.length > MAX_MANIFEST_LINE_CHARS) throw new SourceError('manifest_invalid', `${where}: longer than ${MAX_MANIFEST_LINE_CHARS} characters`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new SourceError('manifest_invalid', `${where}: not JSON (${(err as Error).message})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new SourceError('manifest_invalid', `${where}: not a JSON object`);
  if ('dataset_id' in value && !('id' in value)) {
    const header = ManifestHeaderSchema.safeParse(value);
    if (!header.success) throw new SourceError('manifest_invalid', `${where} (header): ${issues(header.error)}`);
    return { kind: 'header', header: header.data };
  }
  const episode = ManifestEpisodeSchema.safeParse(value);
  if (!episode.success) throw new SourceError('manifest_invalid', `${where} (episode): ${issues(episode.error)}`);
  return { kind: 'episode', episode: episode.data };
}

/**
 * A whole manifest (its pages joined): the header first, then the episodes. Blank lines are
 * skipped; a header anywhere but first, or a missing one, is `manifest_invalid`.
 */
export function parseManifest(ndjson: string): { header: ManifestHeader; episodes: ManifestEpisode[] } {
  let header: ManifestHeader | undefined;
  const episodes: ManifestEpisode[] = [];
  const lines = ndjson.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const text = lines[i]!.trim();
    if (text === '') continue;
    const line = parseManifestLine(text, i + 1);
    if (line.kind === 'header') {
      if (header !== undefined || episodes.length > 0) throw new SourceError('manifest_invalid', `manifest line ${i + 1}: a header after the first line`);
      header = line.header;
    } else {
      if (header === undefined) throw new SourceError('manifest_invalid', `manifest line ${i + 1}: an episode before the header line`);
      episodes.push(line.episode);
    }
  }
  if (header === undefined) throw new SourceError('manifest_invalid', 'the manifest has no header line');
  return { header, episodes };
}
