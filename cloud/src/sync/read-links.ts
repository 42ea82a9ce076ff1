import {
  iso,
  READ_EVENT,
  READ_LINK_MAX_TTL_S,
  READ_LINK_TTL_S,
  READ_LINKS_MAX_FILES,
  ReadAnswerSchema,
  type ManifestFile,
  type ReadLinks,
  type ReadLinksRequest,
  type ReadRequestEnvelope,
} from '@fleet/protocol';
import { readJsonAnswer } from '../egress/client.js';
import { ApiError, notFound, quote, validationError } from '../errors.js';
import type { EpisodeRow, EpisodeStore, ReplicaRow } from '../store/index.js';
import type { DestinationRow, SyncStore } from '../store/shared/sync-types.js';
import { httpUrl, PROVIDER_MAX_BYTES, PROVIDER_TIMEOUT_MS, postToProvider, type ProviderPostDeps, type ProviderReply } from './provider-post.js';

/**
 * Read links: the cloud asks the provider of a destination that holds a verified replica of an
 * episode for short-lived GET URLs of its files, signed as grant requests are, checks the answer
 * strictly and relays it. The cloud never fetches the URLs and keeps none of them: not in the
 * store, not in a log line, not in an error (an origin at most).
 */

/** How far past the longest lifetime an `expires_at` may be: clocks of two machines disagree a little. */
export const READ_LINK_CLOCK_SKEW_MS = 60_000;
/** Longest piece of a provider's text (its refusal, a path it named) put into an error. */
const MAX_PROVIDER_TEXT = 300;

/** `details.failure` of 502 `provider_failed`. */
export type ReadFailure = 'unreachable' | 'http_error' | 'invalid_json' | 'too_large' | 'schema_invalid' | 'expired';

/** HTTP statuses by which a provider says it does not issue read links (501 `read_links_unsupported`). */
const UNSUPPORTED_STATUSES = new Set([404, 405, 501]);

/** One checked link, as the provider gave it (its `expires_at` as a time). */
export interface CheckedLink {
  url: string;
  expiresAt: number;
}

export type CheckedReadAnswer = { ok: true; links: Map<string, CheckedLink> } | { ok: false; error: ApiError };

/** Provider text as an error may carry it: at most MAX_PROVIDER_TEXT characters, marked when cut. */
function bounded(text: string, max = MAX_PROVIDER_TEXT): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

function failed(destinationId: string, failure: ReadFailure, message: string, httpStatus: number | null): ApiError {
  return new ApiError('provider_failed', bounded(message, 512), { destination_id: destinationId, failure, http_status: httpStatus });
}

/**
 * Checks a provider's parsed answer to a read request, strictly: the schema (links or a
 * refusal); exactly the requested paths, each once; every URL an absolute http(s) URL without
 * credentials; every `expires_at` after `now` and at most READ_LINK_MAX_TTL_S (plus a minute of
 * clock skew) ahead; then every URL's origin one of `readOrigins` (the origins the console's
 * Content-Security-Policy lets a browser read from). The origin comes last, so an answer that is
 * wrong anyway is `provider_failed`, and `read_origin_not_allowed` means the links were good but
 * the installation does not allow their origin. Errors never carry a URL, only its origin.
 */
export function checkReadAnswer(
  json: unknown,
  request: { destinationId: string; paths: readonly string[] },
  now: number,
  readOrigins: ReadonlySet<string>,
  httpStatus = 200,
): CheckedReadAnswer {
  const fail = (failure: ReadFailure, message: string): CheckedReadAnswer => ({ ok: false, error: failed(request.destinationId, failure, message, httpStatus) });
  // The two forms one after the other (as the union tries them), so that the code knows which
  // one the answer is: a loose object of links may carry a `refused` key, and the other way round.
  const [linksForm, refusalForm] = ReadAnswerSchema.options;
  const asLinks = linksForm.safeParse(json);
  if (!asLinks.success) {
    const asRefusal = refusalForm.safeParse(json);
    if (asRefusal.success) {
      const message = asRefusal.data.refused.message;
      return {
        ok: false,
        error: new ApiError('read_links_refused', `the destination's provider refused read links: ${bounded(message)}`, {
          destination_id: request.destinationId,
          provider_message: bounded(message),
        }),
      };
    }
    // The issue of the form the answer meant (it has `refused`, or it is meant to be links),
    // which says what is wrong rather than "matches neither".
    const meant = typeof json === 'object' && json !== null && 'refused' in json ? asRefusal : asLinks;
    const issue = meant.error.issues[0];
    const where = issue ? `${issue.path.map(String).join('.') || 'answer'}: ${issue.message}` : 'invalid';
    return fail('schema_invalid', `the answer is neither read links nor a refusal (${bounded(where, 200)})`);
  }
  const answer = asLinks.data;
  const wanted = new Set(request.paths);
  const links = new Map<string, CheckedLink>();
  const latest = now + READ_LINK_MAX_TTL_S * 1000 + READ_LINK_CLOCK_SKEW_MS;
  for (const [i, file] of answer.files.entries()) {
    const path = quote(file.path);
    if (!wanted.has(file.path)) return fail('schema_invalid', `files.${i}: ${path} was not asked for`);
    if (links.has(file.path)) return fail('schema_invalid', `files.${i}: ${path} is listed twice`);
    const url = httpUrl(file.url);
    if (url === null) return fail('schema_invalid', `files.${i} (${path}): the url is not an absolute http(s) URL`);
    if (url.username !== '' || url.password !== '') return fail('schema_invalid', `files.${i} (${path}): the url carries credentials`);
    const expiresAt = Date.parse(file.expires_at);
    if (!(expiresAt > now)) return fail('expired', `files.${i} (${path}): the link expired at ${file.expires_at}`);
    if (expiresAt > latest) return fail('expired', `files.${i} (${path}): expires_at ${file.expires_at} is more than ${READ_LINK_MAX_TTL_S} s ahead`);
    links.set(file.path, { url: file.url, expiresAt });
  }
  const missing = request.paths.filter((p) => !links.has(p));
  if (missing.length > 0) return fail('schema_invalid', `the answer omits ${missing.length} requested file(s), e.g. ${quote(missing[0]!)}`);
  for (const link of links.values()) {
    const origin = new URL(link.url).origin;
    if (!readOrigins.has(origin)) return { ok: false, error: originRefused(request.destinationId, origin, readOrigins) };
  }
  return { ok: true, links };
}

function originRefused(destinationId: string, origin: string, readOrigins: ReadonlySet<string>): ApiError {
  const shown = bounded(origin, 256);
  const message =
    readOrigins.size === 0
      ? `the provider's links are on ${shown}, but this installation allows no read origins (its operator sets them with --read-origin or FLEET_READ_ORIGINS)`
      : `the provider's links are on ${shown}, which is not one of this installation's read origins (--read-origin, FLEET_READ_ORIGINS)`;
  return new ApiError('read_origin_not_allowed', message, { destination_id: destinationId, origin: shown });
}

/** A provider's reply (no answer, a status, a body) as checked links or the API's error. */
export function readReply(
  reply: ProviderReply,
  request: { destinationId: string; paths: readonly string[] },
  now: number,
  readOrigins: ReadonlySet<string>,
  timeoutMs: number,
): CheckedReadAnswer {
  const { destinationId } = request;
  switch (reply.kind) {
    case 'timeout':
      return { ok: false, error: new ApiError('provider_timeout', `the destination's provider did not answer within ${timeoutMs} ms`, { destination_id: destinationId, timeout_ms: timeoutMs }) };
    case 'unreachable':
      return { ok: false, error: failed(destinationId, 'unreachable', `the destination's provider is not reachable (${reply.message})`, null) };
    case 'too_large':
      return { ok: false, error: failed(destinationId, 'too_large', `the provider's answer is larger than ${PROVIDER_MAX_BYTES} bytes`, reply.status) };
    case 'answered':
      break;
  }
  if (UNSUPPORTED_STATUSES.has(reply.status)) {
    return {
      ok: false,
      error: new ApiError('read_links_unsupported', `the destination's provider does not issue read links (it answered HTTP ${reply.status})`, {
        destination_id: destinationId,
        http_status: reply.status,
      }),
    };
  }
  if (reply.status < 200 || reply.status >= 300) {
    return { ok: false, error: failed(destinationId, 'http_error', `the destination's provider answered HTTP ${reply.status}`, reply.status) };
  }
  const json = readJsonAnswer(reply);
  if (!json.ok) return { ok: false, error: failed(destinationId, 'invalid_json', `the provider's answer is ${json.message}`, reply.status) };
  return checkReadAnswer(json.value, request, now, readOrigins, reply.status);
}

/** The replicas as a 409 `replica_not_verified` shows them: where the episode is and how far. */
function replicaStates(replicas: readonly ReplicaRow[]): { destination_id: string; state: ReplicaRow['state']; error: string | null }[] {
  return replicas.map((r) => ({ destination_id: r.destinationId, state: r.state, error: r.error }));
}

function notVerified(episode: EpisodeRow, message: string): ApiError {
  return new ApiError('replica_not_verified', message, { replicas: replicaStates(episode.replicas) });
}

/**
 * The files a request names, in its order, with the manifest's size and digest; every manifest
 * file (in manifest order) when it names none. Throws 400 `validation_failed` for a path the
 * manifest lacks (`unknown_file`), a path named twice (`duplicate_file`), or an episode of more
 * files than one request may carry when none are named (`too_many_files`).
 */
export function requestedFiles(episode: EpisodeRow, files: readonly string[] | undefined): ManifestFile[] {
  const manifest = episode.manifest.files;
  if (files === undefined) {
    if (manifest.length > READ_LINKS_MAX_FILES) {
      throw validationError('body', '/files', `the episode has ${manifest.length} files; name at most ${READ_LINKS_MAX_FILES} of them in files`, 'too_many_files');
    }
    return [...manifest];
  }
  const byPath = new Map(manifest.map((f) => [f.path, f]));
  const seen = new Set<string>();
  return files.map((path, i) => {
    const file = byPath.get(path);
    if (!file) throw validationError('body', `/files/${i}`, `${quote(path)} is not a file of this episode's manifest`, 'unknown_file');
    if (seen.has(path)) throw validationError('body', `/files/${i}`, `${quote(path)} is named twice`, 'duplicate_file');
    seen.add(path);
    return file;
  });
}

export interface ReadLinkerOptions extends ProviderPostDeps {
  store: { sync: Pick<SyncStore, 'getDestination'>; episodes: Pick<EpisodeStore, 'get'> };
  /** The installation's read origins (`--read-origin`), each `scheme://host[:port]`. */
  readOrigins: readonly string[];
}

/** `POST /v1/episodes/{id}/read-links`: the replica, the provider's links, every check. */
export class ReadLinker {
  private readonly origins: ReadonlySet<string>;

  constructor(private readonly opts: ReadLinkerOptions) {
    this.origins = new Set(opts.readOrigins);
  }

  /** Read links for `episodeId` of `orgId`; throws the API's documented errors, never `internal` for a provider's fault. */
  async issue(orgId: string, episodeId: string, body: ReadLinksRequest = {}): Promise<ReadLinks> {
    const { store, clock, logger } = this.opts;
    const episode = await store.episodes.get(orgId, episodeId);
    if (!episode) throw notFound('episode');
    const files = requestedFiles(episode, body.files);
    const { replica, destination } = await this.replicaOf(episode, body.destination_id);
    if (files.length === 0) return { episode_id: episode.id, destination_id: destination.id, files: [] };

    const envelope: ReadRequestEnvelope = {
      episode_id: episode.id,
      org_id: orgId,
      request: {
        destination_id: destination.id,
        episode: { robot_id: episode.robotId, recording_session_id: episode.report.recording_session_id, episode_seq: episode.report.episode_seq },
        object_key: replica.objectKey,
        files: files.map((f) => ({ path: f.path, size_bytes: f.size_bytes, sha256: f.sha256 })),
        expires_in_s: READ_LINK_TTL_S,
      },
    };
    const timeoutMs = this.opts.timeoutMs ?? PROVIDER_TIMEOUT_MS;
    const { reply, latencyMs } = await postToProvider(this.opts, destination, READ_EVENT, envelope, 'read provider');
    const request = { destinationId: destination.id, paths: files.map((f) => f.path) };
    const checked = readReply(reply, request, clock.now(), this.origins, timeoutMs);
    // The forward in the operator's log: which destination, how it went, how long; never a URL
    // of the answer (they are bearer secrets until they expire).
    logger.info(
      {
        episode_id: episode.id,
        destination_id: destination.id,
        files: files.length,
        http_status: reply.kind === 'answered' || reply.kind === 'too_large' ? reply.status : null,
        latency_ms: latencyMs,
        result: checked.ok ? 'issued' : checked.error.code,
        ...(checked.ok ? {} : { failure: checked.error.details?.failure }),
      },
      'read links forwarded',
    );
    if (!checked.ok) throw checked.error;
    return {
      episode_id: episode.id,
      destination_id: destination.id,
      files: files.map((f) => {
        const link = checked.links.get(f.path)!;
        return { path: f.path, url: link.url, expires_at: iso(link.expiresAt), destination_id: destination.id, size_bytes: f.size_bytes, sha256: f.sha256 };
      }),
    };
  }

  /**
   * The replica to read: the named destination's (404 when the organization has no such
   * destination, 409 `conflict` when it is revoked, 409 `replica_not_verified` when it holds no
   * verified replica), else the first verified replica, in the episode's order, whose
   * destination is not revoked.
   */
  private async replicaOf(episode: EpisodeRow, destinationId: string | undefined): Promise<{ replica: ReplicaRow; destination: DestinationRow }> {
    const { sync } = this.opts.store;
    if (destinationId !== undefined) {
      const destination = await sync.getDestination(episode.orgId, destinationId);
      if (!destination) throw notFound('destination');
      if (destination.revokedAt !== null) throw new ApiError('conflict', 'the destination is revoked', { destination_id: destination.id });
      const replica = episode.replicas.find((r) => r.destinationId === destination.id);
      if (!replica) throw notVerified(episode, `the episode has no replica at destination ${destination.id}`);
      if (replica.state !== 'verified') throw notVerified(episode, `the episode's replica at destination ${destination.id} is ${replica.state}, not verified`);
      return { replica, destination };
    }
    for (const replica of episode.replicas) {
      if (replica.state !== 'verified') continue;
      const destination = await sync.getDestination(episode.orgId, replica.destinationId);
      if (destination && destination.revokedAt === null) return { replica, destination };
    }
    const message =
      episode.replicas.length === 0
        ? 'the episode has no replica yet: its files are still on the robot only'
        : 'the episode has no verified replica at a live destination yet';
    throw notVerified(episode, message);
  }
}
