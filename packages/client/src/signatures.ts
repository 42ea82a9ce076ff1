import { DESTINATION_ID_HEADER, GRANT_EVENT } from '@fleet/protocol/browser';
import { DEFAULT_TOLERANCE_S, SIGNATURE_HEADER, verifySignature } from '@fleet/protocol/signature';

/**
 * Receiver helpers for what the cloud signs: webhook deliveries and the grant requests it
 * forwards to a customer's grant provider. Both carry
 * `X-Service-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`, keyed with
 * the secret string as issued (`whsec_…` for webhooks, `dsec_…` for destinations); while a
 * webhook secret rotates, the header has one `v1=` per secret and either may match. The check
 * uses the cloud's own implementation (from `@fleet/protocol`): every entry is compared in
 * constant time, and a timestamp more than `toleranceS` (300 s) from now is refused as stale.
 * Verify the raw bytes as received, before any JSON parsing.
 */

/** Node's `req.headers`, a fetch `Headers`, or a plain record. */
export type HeaderSource = Headers | Record<string, string | string[] | undefined>;

export interface VerifyOptions {
  /** Seconds a timestamp may be away from now (default 300). */
  toleranceS?: number;
  /** Now in milliseconds since the epoch, or a function giving it (default Date.now). */
  now?: number | (() => number);
}

export type SignatureFailure = 'missing_signature' | 'malformed' | 'stale' | 'mismatch' | 'wrong_event';

export type WebhookVerification =
  | { ok: true; timestamp: number; event: string | undefined; eventId: string | undefined }
  | { ok: false; reason: SignatureFailure };

export type GrantRequestVerification =
  | { ok: true; timestamp: number; eventId: string | undefined; destinationId: string | undefined }
  | { ok: false; reason: SignatureFailure };

function header(headers: HeaderSource, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  const lower = name.toLowerCase();
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() !== lower || v === undefined) continue;
    return Array.isArray(v) ? v.join(',') : v;
  }
  return undefined;
}

function check(rawBody: string | Uint8Array, headers: HeaderSource, secrets: string | readonly string[], opts: VerifyOptions) {
  const signature = header(headers, SIGNATURE_HEADER);
  if (signature === undefined) return { ok: false as const, reason: 'missing_signature' as const };
  const nowMs = typeof opts.now === 'function' ? opts.now() : (opts.now ?? Date.now());
  return verifySignature({
    body: typeof rawBody === 'string' ? rawBody : Buffer.from(rawBody.buffer, rawBody.byteOffset, rawBody.byteLength),
    header: signature,
    secrets: typeof secrets === 'string' ? [secrets] : secrets,
    nowS: Math.floor(nowMs / 1000),
    toleranceS: opts.toleranceS ?? DEFAULT_TOLERANCE_S,
  });
}

/** Checks a webhook delivery: `secrets` are the subscription's current (and, during a rotation, previous) `whsec_…`. */
export function verifyWebhookSignature(rawBody: string | Uint8Array, headers: HeaderSource, secrets: string | readonly string[], opts: VerifyOptions = {}): WebhookVerification {
  const verdict = check(rawBody, headers, secrets, opts);
  if (!verdict.ok) return verdict;
  return { ok: true, timestamp: verdict.timestamp, event: header(headers, 'X-Service-Event'), eventId: header(headers, 'X-Service-Event-Id') };
}

/**
 * Checks a grant request forwarded by the cloud to a grant provider: the signature with the
 * destination's `dsec_…`, and that `X-Service-Event`, when present, is `grant.request`. Compare
 * `destinationId` with the envelope's `request.destination_id` after parsing.
 */
export function verifyGrantRequestSignature(rawBody: string | Uint8Array, headers: HeaderSource, secrets: string | readonly string[], opts: VerifyOptions = {}): GrantRequestVerification {
  const verdict = check(rawBody, headers, secrets, opts);
  if (!verdict.ok) return verdict;
  const event = header(headers, 'X-Service-Event');
  if (event !== undefined && event !== GRANT_EVENT) return { ok: false, reason: 'wrong_event' };
  return { ok: true, timestamp: verdict.timestamp, eventId: header(headers, 'X-Service-Event-Id'), destinationId: header(headers, DESTINATION_ID_HEADER) };
}
