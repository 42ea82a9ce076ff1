import { randomBytes } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { DESTINATION_ID_HEADER, signPayload, SIGNATURE_HEADER, type Clock } from '@fleet/protocol';
import { EgressError, type EgressClient } from '../egress/client.js';
import type { SecretBox } from '../secret-box.js';
import type { DestinationRow } from '../store/shared/sync-types.js';

/** The spec's bounds on a grant provider: an answer within 10 s, at most 1 MiB. */
export const PROVIDER_TIMEOUT_MS = 10_000;
export const PROVIDER_MAX_BYTES = 1024 * 1024;

/** What the cloud needs to POST a signed request to a destination's provider. */
export interface ProviderPostDeps {
  egress: EgressClient;
  secrets: SecretBox;
  clock: Clock;
  logger: FastifyBaseLogger;
  timeoutMs?: number;
}

/**
 * How a provider answered one signed POST, before anyone reads what it said: an HTTP answer
 * (any status) with its body, or why there was none. Never an exception for the provider's
 * faults; each message is one a tenant may read (no resolved address, no resolver text).
 */
export type ProviderReply =
  | { kind: 'answered'; status: number; body: Buffer }
  | { kind: 'too_large'; status: number | null; message: string }
  | { kind: 'timeout'; message: string }
  | { kind: 'unreachable'; message: string };

/**
 * POSTs `envelope` to `destination`'s URL through the egress client, signed with the
 * destination's secret as every request to a provider is (grant requests, the destination check,
 * read requests): `X-Service-Event` names what it is, `X-Service-Event-Id` is new per request.
 * The answer is bounded (PROVIDER_MAX_BYTES) and the whole exchange timed out
 * (PROVIDER_TIMEOUT_MS unless `deps.timeoutMs`). An unreachable provider's detail (the address,
 * the socket's text) goes to the operator's log under `what` ("grant provider", "read provider").
 */
export async function postToProvider(
  deps: ProviderPostDeps,
  destination: DestinationRow,
  event: string,
  envelope: unknown,
  what: string,
): Promise<{ reply: ProviderReply; latencyMs: number }> {
  const { egress, secrets, clock } = deps;
  const body = JSON.stringify(envelope);
  const started = performance.now();
  const headers = {
    'content-type': 'application/json',
    'x-service-event': event,
    'x-service-event-id': `evt_${randomBytes(12).toString('base64url')}`,
    [SIGNATURE_HEADER.toLowerCase()]: signPayload(body, [secrets.open(destination.secretSealed)], Math.floor(clock.now() / 1000)),
    [DESTINATION_ID_HEADER.toLowerCase()]: destination.id,
  };
  let reply: ProviderReply;
  try {
    const res = await egress.post(destination.url, { headers, body, timeoutMs: deps.timeoutMs ?? PROVIDER_TIMEOUT_MS, maxResponseBytes: PROVIDER_MAX_BYTES });
    reply = { kind: 'answered', status: res.status, body: res.body };
  } catch (err) {
    if (!(err instanceof EgressError)) throw err;
    if (err.failure === 'too_large') {
      reply = { kind: 'too_large', status: err.details.status ?? null, message: `the answer is larger than ${PROVIDER_MAX_BYTES} bytes` };
    } else if (err.failure === 'timeout') {
      reply = { kind: 'timeout', message: err.publicMessage };
    } else {
      // The tenant reads the failure in words; the resolved address or resolver text goes to the
      // operator's log only.
      deps.logger.warn({ destination_id: destination.id, failure: err.failure, error: err.message }, `${what} not reachable`);
      reply = { kind: 'unreachable', message: `${err.failure}: ${err.publicMessage}` };
    }
  }
  return { reply, latencyMs: Math.round(performance.now() - started) };
}

/** The URL when `u` is an absolute http(s) URL: what a provider may hand out (upload or read links). */
export function httpUrl(u: string): URL | null {
  try {
    const url = new URL(u);
    return url.protocol === 'https:' || url.protocol === 'http:' ? url : null;
  } catch {
    return null;
  }
}
