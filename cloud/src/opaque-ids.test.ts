import { createCipheriv, randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { base32Decode, base32Encode } from './ids.js';
import { OpaqueIds, type OpaqueKind } from './opaque-ids.js';
import { SecretBox } from './secret-box.js';

const KINDS: OpaqueKind[] = ['delivery', 'attempt', 'episodeCursor'];

describe('opaque ids', () => {
  const ids = new OpaqueIds(randomBytes(32));

  it('round-trips every safe integer of every kind, with its prefix', () => {
    fc.assert(
      fc.property(fc.constantFrom(...KINDS), fc.oneof(fc.integer({ min: 0, max: 1000 }), fc.maxSafeNat()), (kind, n) => {
        const handle = ids.encode(kind, n);
        expect(ids.decode(kind, handle)).toBe(n);
        if (kind === 'delivery') expect(handle).toMatch(/^dlv_[a-z2-7]{26}$/);
        if (kind === 'attempt') expect(handle).toMatch(/^att_[a-z2-7]{26}$/);
        if (kind === 'episodeCursor') expect(handle).toMatch(/^[A-Za-z0-9_-]{22}$/);
      }),
    );
  });

  it('shows nothing of the number: neighbours share no visible order or digits', () => {
    const handles = [1, 2, 3, 4, 5, 6, 7, 8].map((n) => ids.encode('delivery', n));
    expect(new Set(handles).size).toBe(8);
    expect([...handles].sort()).not.toEqual(handles);
    // Consecutive numbers differ in most of their characters (a permutation of the whole block).
    for (let i = 1; i < handles.length; i++) {
      const [a, b] = [handles[i - 1]!.slice(4), handles[i]!.slice(4)];
      expect([...a].filter((c, j) => c === b[j]).length).toBeLessThan(8);
    }
  });

  it("refuses another kind's handle, another key's, and anything made up", () => {
    const d = ids.encode('delivery', 42);
    expect(ids.decode('attempt', d)).toBeNull();
    expect(ids.decode('attempt', `att_${d.slice(4)}`)).toBeNull();
    expect(new OpaqueIds(randomBytes(32)).decode('delivery', d)).toBeNull();
    for (const bad of ['', 'dlv_', '42', 'dlv_42', `${d}a`, d.slice(0, -1), d.toUpperCase(), 'dlv_aaaaaaaaaaaaaaaaaaaaaaaaaa', ids.encode('episodeCursor', 42)]) {
      expect(ids.decode('delivery', bad)).toBeNull();
    }
    expect(ids.decode('episodeCursor', 'eyJzIjo0Mn0')).toBeNull(); // the old {"s":42}
    fc.assert(
      fc.property(fc.string({ maxLength: 40 }), (s) => {
        expect(ids.decode('episodeCursor', s)).toBeNull();
      }),
    );
  });

  it('is one AES-256 block under the key, the same from ciphers used for many handles as from a fresh one', () => {
    const key = randomBytes(32);
    const reused = new OpaqueIds(key);
    const fresh = (kind: number, n: number) => {
      const block = Buffer.alloc(16);
      block[0] = 1;
      block[1] = kind;
      block.writeBigUInt64BE(BigInt(n), 8);
      const c = createCipheriv('aes-256-ecb', key, null).setAutoPadding(false);
      return Buffer.concat([c.update(block), c.final()]);
    };
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.maxSafeNat(), fc.string({ maxLength: 30 })), { minLength: 1, maxLength: 20 }), (steps) => {
        for (const [n, junk] of steps) {
          const handle = reused.encode('delivery', n);
          expect(base32Decode(handle.slice(4))).toEqual(fresh(1, n));
          expect(Buffer.from(reused.encode('episodeCursor', n), 'base64url')).toEqual(fresh(3, n));
          // Refused input between handles leaves nothing behind in the decipher.
          expect(reused.decode('delivery', `dlv_${junk}`)).toBeNull();
          expect(reused.decode('attempt', handle)).toBeNull();
          expect(reused.decode('delivery', handle)).toBe(n);
        }
      }),
    );
  });

  it('is the same on every replica that shares the installation key, and differs across keys', () => {
    const key = randomBytes(32);
    const a = new SecretBox(key).opaqueIds();
    const b = new SecretBox(Buffer.from(key)).opaqueIds();
    expect(a.encode('attempt', 7)).toBe(b.encode('attempt', 7));
    expect(SecretBox.random().opaqueIds().encode('attempt', 7)).not.toBe(a.encode('attempt', 7));
  });
});

describe('base32', () => {
  it('decodes what it encodes, and nothing it could not have written', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), (bytes) => {
        expect(base32Decode(base32Encode(Buffer.from(bytes)))).toEqual(Buffer.from(bytes));
      }),
    );
    expect(base32Decode('a1')).toBeNull(); // not in the alphabet
    expect(base32Decode('ab')).toBeNull(); // non-zero padding bits
    expect(base32Decode('a')).toBeNull(); // 5 bits: no whole byte
  });
});
