import { hash, randomBytes } from 'node:crypto';

/** Random identifier with a type prefix, e.g. `key_3n5f…`. 128 bits, base32 lower-case. */
export function newId(prefix: string): string {
  return `${prefix}_${base32(randomBytes(16))}`;
}

/** A secret with a prefix (`ak_`, `whsec_`, …): 256 random bits, base64url. */
export function newSecret(prefix: string): string {
  return `${prefix}_${randomBytes(32).toString('base64url')}`;
}

/**
 * API keys carry 256 random bits, so a plain SHA-256 is a sound one-way store (no dictionary to
 * attack, and a slow hash would only cost every request CPU). The one-shot `hash` skips the
 * Hash object createHash builds: this runs on every authenticated request.
 */
export function hashSecret(secret: string): string {
  return hash('sha256', secret, 'hex');
}

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';
function base32(buf: Buffer): string {
  let out = '';
  let bits = 0;
  let value = 0;
  for (const byte of buf) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += ALPHABET[(value << (5 - bits)) & 31];
  return out;
}
