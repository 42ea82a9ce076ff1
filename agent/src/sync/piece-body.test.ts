import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { PieceBody, PiecePool } from './piece-body.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** `count` pieces of `size` bytes from `pool`, piece i filled with the byte i (so a reused buffer sent early shows). */
async function* numbered(pool: PiecePool, count: number, size: number): AsyncGenerator<Buffer> {
  for (let i = 0; i < count; i++) yield pool.take(size).fill(i & 0xff);
}

function expected(count: number, size: number): Buffer {
  const out = Buffer.alloc(count * size);
  for (let i = 0; i < count; i++) out.fill(i & 0xff, i * size, (i + 1) * size);
  return out;
}

describe('PieceBody', () => {
  it('gives a piece back only at a resume() after a pause() that followed its hand-over', async () => {
    const pool = new PiecePool(16);
    const body = new PieceBody(numbered(pool, 3, 16), pool);
    // What each piece held when it was handed over (a consumer done with a piece keeps no copy).
    const got: number[] = [];
    const ended = new Promise((resolve) => body.once('end', resolve));
    body.on('data', (c: Buffer) => {
      got.push(c[0]!);
      // The consumer's socket is full after the first piece.
      if (got.length === 1) body.pause();
    });
    await expect.poll(() => got.length).toBe(1);
    // Paused, one piece read ahead: both lent, neither back.
    await expect.poll(() => pool.lentCount).toBe(2);
    body.resume();
    await ended;
    expect(got).toEqual([0, 1, 2]);
    // The first piece came back at resume() and served the third; the second and third were
    // handed over without a pause since: still lent.
    expect(pool.allocated).toBe(2);
    expect(pool.lentCount).toBe(2);
    body.settle(true);
    expect(pool.lentCount).toBe(0);
  });

  it('a consumer that never pauses gets no piece back before the request is settled', async () => {
    const pool = new PiecePool(16);
    const body = new PieceBody(numbered(pool, 5, 16), pool);
    const ended = new Promise((resolve) => body.once('end', resolve));
    body.on('data', () => undefined);
    await ended;
    expect(pool.allocated).toBe(5);
    // A failed request: its pieces are dropped, never lent again.
    body.settle(false);
    expect(pool.allocated).toBe(0);
    expect(() => pool.take(17)).toThrow(RangeError);
  });

  it('through undici to a slow reader, every byte arrives as it was read while buffers are reused', async () => {
    // The reader takes one socket read per turn of the event loop, so the sender's socket backs up
    // and pieces wait in it while later ones are read: a buffer reused before its bytes left would
    // put a later piece's bytes in its place.
    const received: Buffer[] = [];
    const server = createServer((req: IncomingMessage, res) => {
      req.on('data', (c: Buffer) => {
        received.push(c);
        req.pause();
        setImmediate(() => req.resume());
      });
      req.on('end', () => res.end('ok'));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const dispatcher = new Agent();
    cleanups.push(async () => {
      await dispatcher.close();
      await new Promise((resolve) => server.close(resolve));
    });
    const size = 256 * 1024;
    const count = 64;
    const pool = new PiecePool(size);
    let given = 0;
    const give = pool.give.bind(pool);
    pool.give = (piece) => {
      given += 1;
      give(piece);
    };
    const body = new PieceBody(numbered(pool, count, size), pool);
    const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, {
      method: 'PUT',
      body,
      headers: { 'content-length': String(count * size) },
      dispatcher,
    });
    expect(await res.body.text()).toBe('ok');
    body.settle(true);
    expect(Buffer.concat(received).equals(expected(count, size))).toBe(true);
    // Buffers did come back during the send (else this proves nothing about reuse).
    expect(given).toBeGreaterThan(count / 2);
    expect(pool.allocated).toBeLessThan(count / 4);
    expect(pool.lentCount).toBe(0);
  });
});
