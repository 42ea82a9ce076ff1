import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { quotaFreeBytes, usedBytes } from './disk-quota.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

describe('a simulated robot disk quota', () => {
  test('free bytes are the quota less what the data directory holds, down to 0 once it is full', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fs-quota-'));
    dirs.push(dir);
    await mkdir(join(dir, 'episodes', 'ep1'), { recursive: true });
    await writeFile(join(dir, 'episodes', 'ep1', 'a.mcap'), Buffer.alloc(3000));
    await writeFile(join(dir, 'agent.sqlite'), Buffer.alloc(1000));
    expect(await usedBytes(dir)).toBe(4000);
    const free = quotaFreeBytes(10_000);
    expect(await free(dir)).toBe(6000);
    // Filling the disk: a file that takes what is left.
    await writeFile(join(dir, 'filler'), Buffer.alloc(7000));
    expect(await free(dir)).toBe(0);
  });

  test('never more than the real file system has', async () => {
    const free = quotaFreeBytes(1_000_000, async () => 1234);
    expect(await free(join(tmpdir(), 'fs-quota-missing'))).toBe(1234);
  });
});
