import { open } from 'node:fs/promises';
import type { ByteSource } from './byte-source.js';

/**
 * A local file as a `ByteSource` (Node only, hence its own entry point: the main one runs in the
 * browser too). The handle stays open until `close()`.
 */
export async function fileSource(path: string): Promise<ByteSource & { path: string; close(): Promise<void> }> {
  const fh = await open(path, 'r');
  let size: bigint;
  try {
    size = BigInt((await fh.stat()).size);
  } catch (err) {
    await fh.close().catch(() => undefined);
    throw err;
  }
  let closed = false;
  return {
    path,
    size,
    read: async (offset, length) => {
      if (offset + length > size) throw new Error(`${path}: read past the end of the file (${offset}+${length} > ${size})`);
      // Every byte is read into it below: no need to zero it first (chunks are up to MiBs).
      const buf = Buffer.allocUnsafe(Number(length));
      let done = 0;
      while (done < buf.length) {
        const { bytesRead } = await fh.read(buf, done, buf.length - done, Number(offset) + done);
        if (bytesRead === 0) throw new Error(`${path}: the file ended at ${Number(offset) + done}, expected ${size} bytes`);
        done += bytesRead;
      }
      return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    },
    close: async () => {
      if (closed) return;
      closed = true;
      await fh.close();
    },
  };
}
