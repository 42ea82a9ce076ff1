import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { Worker } from 'node:worker_threads';
import { crc32 } from 'node:zlib';
import { FileHashError } from '../errors.js';

/**
 * The file's SHA-256 for verification, computed off the sending path.
 *
 * SHA-256 is the one hash verification needs (the manifest's), and on one core it runs at about
 * the rate a local link takes bytes: hashed inline, it halves the upload rate. So a worker thread
 * reads the file in order and hashes it while the main thread only moves bytes. To keep the
 * guarantee that the digest is of the bytes sent (a file changed after finalize must never verify),
 * both sides also take a CRC-32 of every block (1 MiB, counted from the start of each part): the
 * sender of what it sent, the worker of what it hashed. Equal CRCs tie the sent bytes to the hashed
 * ones; CRC-32 (zlib, hardware-assisted) costs a small fraction of a hash.
 *
 * Files up to `INLINE_MAX` bytes are hashed on the main thread instead: a worker's start-up costs
 * more than hashing them.
 */

/** Bytes per CRC block and per read. */
export const HASH_BLOCK = 1024 * 1024;
const INLINE_MAX = 8 * 1024 * 1024;

export interface FileDigest {
  sha256: string;
  /** CRC-32 of each block: part p's block k is at `p * blocksPerPart(partSize) + k`. */
  crcs: Uint32Array;
}

export function blocksPerPart(partSize: number): number {
  return Math.max(1, Math.ceil(partSize / HASH_BLOCK));
}

function blockCount(size: number, partSize: number): number {
  const parts = Math.max(1, Math.ceil(size / partSize));
  return parts * blocksPerPart(partSize);
}

/**
 * The CRCs of the bytes a sender hands on, by absolute file offset; within a block, bytes must
 * arrive in order (each part is read in order, parts may interleave).
 */
export class SentCrcs {
  readonly crcs: Uint32Array;
  /** Blocks fed at all (a part skipped on resume has none). */
  readonly fed: Uint8Array;
  private readonly perPart: number;

  constructor(
    size: number,
    private readonly partSize: number,
  ) {
    this.crcs = new Uint32Array(blockCount(size, partSize));
    this.fed = new Uint8Array(this.crcs.length);
    this.perPart = blocksPerPart(partSize);
  }

  add(offset: number, data: Uint8Array): void {
    let at = 0;
    while (at < data.length) {
      const abs = offset + at;
      const part = Math.floor(abs / this.partSize);
      const inPart = abs - part * this.partSize;
      const k = Math.floor(inPart / HASH_BLOCK);
      const blockEnd = Math.min((k + 1) * HASH_BLOCK, this.partSize) - inPart;
      const n = Math.min(blockEnd, data.length - at);
      const i = part * this.perPart + k;
      this.crcs[i] = crc32(data.subarray(at, at + n), this.crcs[i]);
      this.fed[i] = 1;
      at += n;
    }
  }

  /** The first block sent whose CRC differs from the hashed one's, or -1. */
  firstMismatch(hashed: Uint32Array): number {
    for (let i = 0; i < this.crcs.length; i++) if (this.fed[i] === 1 && this.crcs[i] !== hashed[i]) return i;
    return -1;
  }
}

/** Reads `file` in order (blocks counted from each part start) and hashes it; the shared loop of both strategies. */
async function hashInline(file: string, size: number, partSize: number, signal?: AbortSignal): Promise<FileDigest> {
  const sha = createHash('sha256');
  const crcs = new Uint32Array(blockCount(size, partSize));
  const perPart = blocksPerPart(partSize);
  const buf = Buffer.allocUnsafe(Math.min(HASH_BLOCK, Math.max(1, size)));
  const fh = await open(file, 'r');
  try {
    let at = 0;
    while (at < size) {
      signal?.throwIfAborted();
      const part = Math.floor(at / partSize);
      const inPart = at - part * partSize;
      const n = Math.min(HASH_BLOCK, Math.min(partSize, size - part * partSize) - inPart);
      const { bytesRead } = await fh.read(buf, 0, n, at);
      if (bytesRead !== n) throw new FileHashError('the file is shorter than its manifest says');
      const view = buf.subarray(0, n);
      sha.update(view);
      crcs[part * perPart + Math.floor(inPart / HASH_BLOCK)] = crc32(view);
      at += n;
    }
  } finally {
    await fh.close();
  }
  return { sha256: sha.digest('hex'), crcs };
}

// The worker's code, kept beside the logic it mirrors (hashInline) and run with `eval`, so the same
// source works from the TypeScript sources (tests) and the built package. CommonJS, no imports of
// the project.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { createHash } = require('node:crypto');
const { openSync, readSync, closeSync } = require('node:fs');
const { crc32 } = require('node:zlib');
const { file, size, partSize, block, perPart, blocks } = workerData;
try {
  const sha = createHash('sha256');
  const crcs = new Uint32Array(blocks);
  const buf = Buffer.allocUnsafe(Math.min(block, Math.max(1, size)));
  const fd = openSync(file, 'r');
  try {
    let at = 0;
    while (at < size) {
      const part = Math.floor(at / partSize);
      const inPart = at - part * partSize;
      const n = Math.min(block, Math.min(partSize, size - part * partSize) - inPart);
      let got = 0;
      while (got < n) {
        const r = readSync(fd, buf, got, n - got, at + got);
        if (r === 0) break;
        got += r;
      }
      if (got !== n) throw new Error('the file is shorter than its manifest says');
      const view = buf.subarray(0, n);
      sha.update(view);
      crcs[part * perPart + Math.floor(inPart / block)] = crc32(view);
      at += n;
    }
  } finally {
    closeSync(fd);
  }
  parentPort.postMessage({ sha256: sha.digest('hex'), crcs }, [crcs.buffer]);
} catch (err) {
  parentPort.postMessage({ error: String(err && err.message ? err.message : err) });
}
`;

function hashInWorker(file: string, size: number, partSize: number, signal?: AbortSignal): Promise<FileDigest> {
  return new Promise<FileDigest>((resolve, reject) => {
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { file, size, partSize, block: HASH_BLOCK, perPart: blocksPerPart(partSize), blocks: blockCount(size, partSize) },
    });
    // A hash in progress never keeps a stopping agent alive.
    worker.unref();
    const onAbort = () => {
      void worker.terminate();
      reject(signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const settle = () => signal?.removeEventListener('abort', onAbort);
    worker.once('message', (m: { sha256?: string; crcs?: Uint32Array; error?: string }) => {
      settle();
      void worker.terminate();
      if (m.error !== undefined || m.sha256 === undefined || m.crcs === undefined) reject(new FileHashError(m.error ?? 'the hashing worker answered nothing'));
      else resolve({ sha256: m.sha256, crcs: m.crcs });
    });
    worker.once('error', (err) => {
      settle();
      reject(err);
    });
    worker.once('exit', (code) => {
      settle();
      reject(new FileHashError(`the hashing worker exited (${code})`));
    });
  });
}

/**
 * Starts hashing `file` (`size` bytes, in parts of `partSize`; a single PUT is one part of the
 * whole size) and resolves with its SHA-256 and block CRCs. A file shorter than `size` rejects
 * with FileHashError; a longer one hashes to another digest.
 */
export function hashFile(file: string, size: number, partSize: number, signal?: AbortSignal): Promise<FileDigest> {
  const ps = Math.max(1, partSize);
  return size <= INLINE_MAX ? hashInline(file, size, ps, signal) : hashInWorker(file, size, ps, signal);
}
