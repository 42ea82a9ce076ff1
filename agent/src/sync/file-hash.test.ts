import { createHash, randomBytes } from 'node:crypto';
import { truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir, removeTempDirs } from '../test-support.js';
import { FileHashError } from '../errors.js';
import { blocksPerPart, HASH_BLOCK, hashFile, SentCrcs } from './file-hash.js';

afterEach(async () => {
  await removeTempDirs();
});

const MiB = 1024 * 1024;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** The CRC of each block counted from each part's start, computed the obvious way. */
function expectedCrcs(bytes: Buffer, partSize: number): number[] {
  const out: number[] = [];
  const parts = Math.max(1, Math.ceil(bytes.length / partSize));
  for (let p = 0; p < parts; p++) {
    const part = bytes.subarray(p * partSize, Math.min((p + 1) * partSize, bytes.length));
    for (let k = 0; k < blocksPerPart(partSize); k++) out.push(k * HASH_BLOCK < part.length ? crc32(part.subarray(k * HASH_BLOCK, (k + 1) * HASH_BLOCK)) : 0);
  }
  return out;
}

describe('hashFile', () => {
  // 3 MiB + 5 is hashed inline; 9 MiB + 3 in the worker thread: both must give the same answer.
  for (const size of [0, 3 * MiB + 5, 9 * MiB + 3]) {
    for (const partSize of [Math.max(1, size), 5 * MiB + 1, 2 * MiB]) {
      it(`${size} bytes in parts of ${partSize}: the SHA-256 and the per-part block CRCs`, async () => {
        const dir = await makeTempDir();
        const file = join(dir, 'f.bin');
        const bytes = randomBytes(size);
        await writeFile(file, bytes);
        const d = await hashFile(file, size, partSize);
        expect(d.sha256).toBe(sha(bytes));
        expect([...d.crcs]).toEqual(expectedCrcs(bytes, partSize));
      });
    }
  }

  it('a file shorter than its manifest says is an error, inline and in the worker', async () => {
    const dir = await makeTempDir();
    for (const size of [2 * MiB, 10 * MiB]) {
      const file = join(dir, `f${size}.bin`);
      await writeFile(file, randomBytes(size));
      await truncate(file, size - 10);
      await expect(hashFile(file, size, size)).rejects.toThrow(FileHashError);
    }
  });

  it('an aborted hash rejects and leaves no worker running', async () => {
    const dir = await makeTempDir();
    const file = join(dir, 'f.bin');
    await writeFile(file, randomBytes(40 * MiB));
    const ac = new AbortController();
    const p = hashFile(file, 40 * MiB, 40 * MiB, ac.signal);
    ac.abort(new Error('stop'));
    await expect(p).rejects.toThrow('stop');
  });
});

describe('SentCrcs', () => {
  it('agrees with the hashed CRCs whatever the chunk sizes and however parts interleave, and names the first block that differs', async () => {
    const dir = await makeTempDir();
    const file = join(dir, 'f.bin');
    const partSize = 3 * MiB + 17;
    const bytes = randomBytes(10 * MiB + 5);
    await writeFile(file, bytes);
    const d = await hashFile(file, bytes.length, partSize);
    const sent = new SentCrcs(bytes.length, partSize);
    // Parts 4, 1 and 3 sent (part 2 was done before a resume), in odd chunk sizes, interleaved.
    const cursors = [3, 0, 2].map((p) => ({ at: p * partSize, end: Math.min((p + 1) * partSize, bytes.length) }));
    let step = 0;
    while (cursors.some((c) => c.at < c.end)) {
      for (const c of cursors) {
        const n = Math.min(c.end - c.at, 100_000 + ((step++ * 7919) % 900_000));
        if (n <= 0) continue;
        sent.add(c.at, bytes.subarray(c.at, c.at + n));
        c.at += n;
      }
    }
    expect(sent.firstMismatch(d.crcs)).toBe(-1);
    // One byte sent differently in part 3's second block.
    const other = new SentCrcs(bytes.length, partSize);
    const changed = Buffer.from(bytes);
    changed[2 * partSize + HASH_BLOCK + 10]! ^= 0xff;
    other.add(2 * partSize, changed.subarray(2 * partSize, 3 * partSize));
    expect(other.firstMismatch(d.crcs)).toBe(2 * blocksPerPart(partSize) + 1);
  });
});
