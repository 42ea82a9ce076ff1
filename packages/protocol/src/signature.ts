import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * The signature of webhook deliveries and forwarded grant requests (spec, Events: Headers):
 * `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`, keyed with the secret string as
 * given (`whsec_…` or `dsec_…`). It is Stripe's scheme, so receivers can use an existing
 * verifier. During a secret rotation the header carries one `v1=` per signing secret.
 */
export const SIGNATURE_HEADER = 'X-Service-Signature';
export const DEFAULT_TOLERANCE_S = 300;

function mac(secret: string, t: number, body: string | Buffer): string {
  return createHmac('sha256', secret).update(`${t}.`).update(body).digest('hex');
}

/** The header value for `body` signed at `timestampS` with every secret given (newest first). */
export function signPayload(body: string | Buffer, secrets: readonly string[], timestampS: number): string {
  if (secrets.length === 0) throw new Error('at least one signing secret is required');
  if (!Number.isSafeInteger(timestampS) || timestampS < 0) throw new Error('timestamp must be whole unix seconds');
  return [`t=${timestampS}`, ...secrets.map((s) => `v1=${mac(s, timestampS, body)}`)].join(',');
}

export type VerifyResult = { ok: true; timestamp: number } | { ok: false; reason: 'malformed' | 'stale' | 'mismatch' };

/**
 * Checks a signature header against the raw body: any `v1` entry may match any of `secrets`,
 * compared in constant time; a timestamp further than `toleranceS` from `nowS` is stale.
 */
export function verifySignature(args: {
  body: string | Buffer;
  header: string | undefined;
  secrets: readonly string[];
  nowS: number;
  toleranceS?: number;
}): VerifyResult {
  const { body, header, secrets, nowS } = args;
  const tolerance = args.toleranceS ?? DEFAULT_TOLERANCE_S;
  if (!header || header.length > 8192) return { ok: false, reason: 'malformed' };
  let t: number | null = null;
  const v1: Buffer[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq <= 0) continue;
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === 't' && /^\d{1,12}$/.test(value)) t = Number(value);
    else if (key === 'v1' && /^[0-9a-f]{64}$/.test(value)) v1.push(Buffer.from(value, 'hex'));
  }
  if (t === null || v1.length === 0) return { ok: false, reason: 'malformed' };
  if (Math.abs(nowS - t) > tolerance) return { ok: false, reason: 'stale' };
  for (const secret of secrets) {
    const expected = Buffer.from(mac(secret, t, body), 'hex');
    // Every entry is compared, so the time taken does not say which one matched.
    let matched = false;
    for (const candidate of v1) if (timingSafeEqual(candidate, expected)) matched = true;
    if (matched) return { ok: true, timestamp: t };
  }
  return { ok: false, reason: 'mismatch' };
}
