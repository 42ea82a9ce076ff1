import { hash, randomBytes } from 'node:crypto';

/** Random identifier with a type prefix, e.g. `key_3n5f…`. 128 bits, base32 lower-case. */
export function newId(prefix: string): string {
  return `${prefix}_${base32Encode(randomBytes(16))}`;
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

/** Lower-case base32 without padding (RFC 4648's alphabet). */
export function base32Encode(buf: Buffer): string {
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

/** The bytes of what base32Encode wrote; null for anything it could not have written. */
export function base32Decode(text: string): Buffer | null {
  const bytes: number[] = [];
  let bits = 0;
  let value = 0;
  for (const ch of text) {
    const v = ALPHABET.indexOf(ch);
    if (v < 0) return null;
    value = ((value << 5) | v) & 0xffff;
    bits += 5;
    if (bits >= 8) {
      bytes.push((value >>> (bits - 8)) & 0xff);
      bits -= 8;
    }
  }
  // The leftover bits are the encoder's zero padding (fewer than 5, all zero) or the text is not its.
  if (bits >= 5 || (value & ((1 << bits) - 1)) !== 0) return null;
  return Buffer.from(bytes);
}
