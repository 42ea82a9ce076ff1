import { lstat, readdir, statfs } from 'node:fs/promises';
import { join } from 'node:path';

/** Free bytes of the file system holding a directory, as the agent's disk-pressure measure takes them. */
export type FreeBytes = (dir: string) => Promise<number>;

/** Blocks available to an unprivileged writer (`statfs`), in bytes. */
export const statfsFreeBytes: FreeBytes = async (dir) => {
  const fs = await statfs(dir);
  return Number(fs.bavail) * Number(fs.bsize);
};

/** Bytes of every regular file under `dir` (recursively; symbolic links are not followed). */
export async function usedBytes(dir: string): Promise<number> {
  let total = 0;
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const e of entries) {
    const path = join(dir, e.name);
    if (e.isDirectory()) total += await usedBytes(path);
    else if (e.isFile()) total += await lstat(path).then((s) => s.size, () => 0);
  }
  return total;
}

/**
 * A robot disk of `quotaBytes` for its data directory: the free bytes the agent measures (and
 * reports as disk pressure in its grant requests) are the quota less what the directory holds,
 * never more than the real file system has. A simulated robot's disk can then be filled by
 * writing a file into its data directory, without root and without a small file system. Only
 * the measure changes: writes are not refused (a real full disk would also fail them).
 */
export function quotaFreeBytes(quotaBytes: number, real: FreeBytes = statfsFreeBytes): FreeBytes {
  return async (dir) => Math.max(0, Math.min(await real(dir), quotaBytes - (await usedBytes(dir))));
}
