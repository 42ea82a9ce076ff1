import { FleetApiError, FleetConnectionError, type Episode, type FleetClient } from '@fleet/client';
import { isRecordingError } from '@fleet/recordings';
import type { PlayerProblem } from './types.js';

/**
 * Read links (`POST /v1/episodes/{id}/read-links`) and the words for every way playback can fail
 * before the first frame. A link is a bearer secret for the customer's bucket: it lives in the
 * player's memory only (never in the URL, storage or console output), and no message here
 * quotes one (hosts only).
 */

export interface ReadLink {
  path: string;
  url: string;
  expires_at: string;
  destination_id: string;
  size_bytes: number;
  sha256: string;
}

export interface ReadLinks {
  episode_id: string;
  destination_id: string;
  files: ReadLink[];
}

export interface ReadLinksBody {
  destination_id?: string;
  files?: string[];
}

type ReadLinksMethod = (id: string, body?: ReadLinksBody, o?: { signal?: AbortSignal }) => Promise<ReadLinks>;

/**
 * The typed client's `episodes.readLinks`; with a client built before that method existed, the
 * same route through its openapi-fetch client (`client.api`), with the same error mapping.
 */
export function readLinks(client: FleetClient, id: string, body: ReadLinksBody, signal?: AbortSignal): Promise<ReadLinks> {
  const method = (client.episodes as unknown as { readLinks?: ReadLinksMethod }).readLinks;
  if (method) return method.call(client.episodes, id, body, signal ? { signal } : {});
  return readLinksRaw(client, id, body, signal);
}

async function readLinksRaw(client: FleetClient, id: string, body: ReadLinksBody, signal?: AbortSignal): Promise<ReadLinks> {
  const post = client.api.POST as unknown as (
    path: string,
    init: { params: { path: { id: string } }; body: ReadLinksBody; signal?: AbortSignal },
  ) => Promise<{ response: Response; data?: unknown; error?: unknown }>;
  const r = await post('/v1/episodes/{id}/read-links', { params: { path: { id } }, body, ...(signal ? { signal } : {}) });
  if (!r.response.ok) {
    const e = (r.error as { error?: { code?: string; message?: string; details?: Record<string, unknown>; request_id?: string } } | undefined)?.error;
    throw new FleetApiError({ status: r.response.status, code: e?.code, message: e?.message ?? `HTTP ${r.response.status}`, details: e?.details, requestId: r.response.headers.get('x-request-id') });
  }
  return r.data as ReadLinks;
}

/** The recording files of a manifest the player reads: MCAP (rosbag2's mcap storage, Foxglove's). */
export function isMcapPath(path: string): boolean {
  return path.toLowerCase().endsWith('.mcap');
}

export interface Problem {
  problem: PlayerProblem;
  title: string;
  /** One or two sentences: what happened and what to do. */
  text: string;
  /** The API's or the reader's code and request id, for support. */
  code?: string;
  requestId?: string;
}

/** The host of a URL (a link's query string is its signature: never shown). */
export function hostOf(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return 'the storage';
  }
}

/**
 * What the episode's replicas say before any link is asked for: on the robot only, syncing, or
 * failed verification. Undefined when a replica is verified (then read links can be asked).
 */
export function replicaProblem(episode: Episode): Problem | undefined {
  const replicas = episode.replicas;
  if (replicas.some((r) => r.state === 'verified')) return undefined;
  return replicasProblem(replicas.map((r) => ({ destination_id: r.destination_id, state: r.state, error: r.error })));
}

function replicasProblem(replicas: readonly { destination_id: string; state: string; error?: string | null }[]): Problem {
  if (replicas.length === 0) {
    return {
      problem: 'robot_only',
      title: 'Only on the robot',
      text: 'No destination holds a copy of this recording yet (no routing rule takes the episode, or the robot has not uploaded it), so there is nothing to play. The player starts once a replica is verified.',
    };
  }
  const failed = replicas.find((r) => r.error);
  if (failed) {
    return {
      problem: 'replica_error',
      title: 'Upload or verification failed',
      text: `The copy at destination ${failed.destination_id} failed (${failed.error ?? 'error'}); the robot uploads it again. The player starts once a replica is verified.`,
    };
  }
  const states = [...new Set(replicas.map((r) => r.state))].join(', ');
  return {
    problem: 'syncing',
    title: 'Syncing',
    text: `The recording is still on its way to its destination (${states}); the player starts as soon as the destination has verified the upload.`,
  };
}

const PROVIDER_FAILURES: Readonly<Record<string, string>> = {
  unreachable: 'could not be reached',
  http_error: 'answered with an HTTP error',
  invalid_json: 'answered something that is not JSON',
  too_large: 'answered more than 1 MiB',
  schema_invalid: 'answered links that do not match the request (missing, duplicate or unknown paths, or a URL that is not http(s))',
  expired: 'answered links that are already expired or expire too far in the future (check its clock)',
};

/** Words for anything read-links, the bucket or the reader can throw. */
export function explain(err: unknown): Problem {
  if (err instanceof FleetApiError) {
    const base = { code: err.code === 'http_error' ? `HTTP ${err.status}` : err.code, ...(err.requestId ? { requestId: err.requestId } : {}) };
    const d = err.details ?? {};
    switch (err.code) {
      case 'replica_not_verified': {
        const replicas = Array.isArray(d.replicas) ? (d.replicas as { destination_id: string; state: string; error?: string | null }[]) : [];
        return { ...replicasProblem(replicas), ...base };
      }
      case 'read_links_unsupported':
        return { ...base, problem: 'unsupported', title: 'No read links from this destination', text: "This destination's grant provider does not issue read links (it answered that it does not support read requests), so the browser cannot read the recording from the bucket. Upgrade the provider to one that answers read.request." };
      case 'read_links_refused': {
        // The provider's own words (details.provider_message); the message repeats them after the cloud's preamble.
        const why = typeof d.provider_message === 'string' && d.provider_message !== '' ? d.provider_message : err.message.replace(/^the destination's provider refused read links: /, '');
        return { ...base, problem: 'refused', title: 'Read links refused', text: `The destination's grant provider refused to issue read links, saying: “${why}”. Whoever runs the provider decides which reads it signs.` };
      }
      case 'provider_failed': {
        const how = typeof d.failure === 'string' ? (PROVIDER_FAILURES[d.failure] ?? d.failure) : 'failed';
        const status = typeof d.http_status === 'number' && d.failure === 'http_error' ? ` (HTTP ${d.http_status})` : '';
        return { ...base, problem: 'provider_failed', title: 'Grant provider failed', text: `The destination's grant provider ${how}${status}, so no read link could be issued. Try again later, or check the provider's logs.` };
      }
      case 'read_origin_not_allowed': {
        const origin = typeof d.origin === 'string' ? d.origin : 'its storage';
        return { ...base, problem: 'origin_not_allowed', title: 'Storage origin not allowed', text: `The read link points to ${origin}, which this installation does not allow the console to read from. An operator adds it with fleet-cloud serve --read-origin ${origin}.` };
      }
      case 'provider_timeout': {
        const s = typeof d.timeout_ms === 'number' && d.timeout_ms > 0 ? Math.round(d.timeout_ms / 100) / 10 : 10;
        return { ...base, problem: 'provider_timeout', title: 'Grant provider timed out', text: `The destination's grant provider did not answer within ${s} s, so no read link could be issued. Reload to try again; if it keeps happening, check the provider.` };
      }
      case 'not_found':
        return { ...base, problem: 'not_found', title: 'Not found', text: 'No such episode in your organization (or its destination is not one of yours).' };
      case 'insufficient_scope':
        return { ...base, problem: 'forbidden', title: 'Not allowed', text: `Playing a recording needs the scope ${typeof d.required_scope === 'string' ? d.required_scope : 'data:read'}.` };
      case 'entitlement_required':
        return { ...base, problem: 'forbidden', title: 'Not in your plan', text: `Playing a recording needs the feature ${typeof d.feature === 'string' ? d.feature : 'data.metadata'}.` };
      default:
        return { ...base, problem: 'error', title: 'Could not get read links', text: err.message };
    }
  }
  if (err instanceof FleetConnectionError) return { problem: 'error', title: 'Cloud unreachable', text: `The cloud could not be reached (${err.message}). Check the connection and reload.` };
  if (isRecordingError(err)) {
    const code = err.code;
    const { file, host, detail } = readerMessage(err.message.replace(/^[a-z_]+: /, ''));
    const what = file ? `${file} from ${host ?? 'the bucket'}` : host ? `the recording from ${host}` : 'the recording';
    switch (code) {
      case 'fetch_failed': {
        // The reader's own hint about CORS is said once, below, with this page's origin.
        const why = detail.replace(/; in a browser this is most often .*$/, '');
        const hint = /got no answer/.test(why)
          ? ` Most often the bucket has no CORS rule letting this console's origin (${pageOrigin()}) make Range GETs (see “CORS for playback” in the console's documentation); a network problem is the other cause.`
          : ' The storage or the network failed; reload to try again.';
        return { problem: 'fetch_failed', code, title: 'The browser could not fetch the recording', text: `Reading ${what}: ${why}.${hint}` };
      }
      case 'not_found':
        return { problem: 'object_not_found', code, title: 'Recording not in the bucket', text: `Reading ${what}: the bucket has no object at the link (HTTP 404). The file was deleted or moved after its upload was verified.` };
      case 'forbidden':
        return { problem: 'object_forbidden', code, title: 'The bucket refused the link', text: `Reading ${what}: ${detail}. The bucket refused the read link even after it was renewed; the provider's credentials may lack read permission on the bucket.` };
      case 'size_mismatch': {
        const sizes = /the object is (\d+) bytes, expected (\d+)/.exec(detail);
        const says = sizes ? `the object is ${sizes[1]} bytes, but the robot's manifest lists ${sizes[2]}` : detail;
        return { problem: 'size_mismatch', code, title: 'The file in the bucket changed', text: `Reading ${what}: ${says}. It was replaced after upload, so it is not played.` };
      }
      case 'range_unsupported':
        if (/Content-Range/.test(detail)) {
          return { problem: 'range_unsupported', code, title: 'The bucket hides the range of its answers', text: `Reading ${what}: ${detail}. Add Content-Range to the ExposeHeaders of the bucket's CORS rule (see “CORS for playback” in the console's documentation).` };
        }
        return { problem: 'range_unsupported', code, title: 'Storage without range reads', text: `Reading ${what}: ${detail}. The player reads recordings by ranges only.` };
      case 'unreadable':
        return { problem: 'unreadable', code, title: 'The recording cannot be read', text: file || host ? `Reading ${what}: ${detail}` : detail };
      default:
        return { problem: 'error', code, title: 'The recording cannot be played', text: file || host ? `Reading ${what}: ${detail}` : detail };
    }
  }
  return { problem: 'error', title: 'Something went wrong', text: err instanceof Error ? err.message : String(err) };
}

/**
 * A reader's message split into the file it names (the manifest path the player opened it by),
 * the storage host an HTTP source names and the rest: `<file>: <host>: <detail>`, either prefix
 * absent. The whole message is the detail when it has neither.
 */
export function readerMessage(msg: string): { file?: string; host?: string; detail: string } {
  const m = /^(?:(.+?): )?((?:[a-z0-9-]+\.)*[a-z0-9-]+(?::\d+)?|\[[0-9a-f:.]+\](?::\d+)?): (.+)$/is.exec(msg);
  if (!m) return { detail: msg };
  const [, file, host, detail] = m as unknown as [string, string | undefined, string, string];
  // A file name alone (`bag.mcap: <detail>`) reads like a host name.
  if (file === undefined && /\.mcap$/i.test(host)) return { file: host, detail };
  return { ...(file !== undefined ? { file } : {}), host, detail };
}

function pageOrigin(): string {
  return typeof location === 'undefined' ? "this page's origin" : location.origin;
}
