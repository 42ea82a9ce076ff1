import { randomBytes } from 'node:crypto';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';

/** A sibling name for writing `path` before it is renamed into place. */
export function tempSibling(path: string): string {
  return join(dirname(path), `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
}

/** fsync a file or directory by path (a directory's fsync makes a rename inside it durable). */
export async function fsyncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Write `data` to `path` so that `path` is either absent, the old file, or the whole new one. */
export async function writeFileAtomic(path: string, data: Uint8Array | string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const tmp = tempSibling(path);
  try {
    const fh = await open(tmp, 'w');
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  await fsyncPath(dirname(path));
}

/** Rename a finished temp file into place and make the rename durable. */
export async function commitFile(tmp: string, path: string): Promise<void> {
  await fsyncPath(tmp);
  await rename(tmp, path);
  await fsyncPath(dirname(path));
}

/** JSON as Python's `json.dump(indent=4)` lays it out (LeRobot's `write_json`). */
export function jsonText(value: unknown): string {
  return JSON.stringify(value, null, 4);
}
