import { Readable } from 'node:stream';

/**
 * Upload bodies read into reused buffers.
 *
 * A fresh buffer per piece lives outside V8's heap and, once the socket has written it, stays
 * resident until a full collection, which V8 starts only after about 64 MiB of such memory: the
 * sender grew by that much whatever the read size. Reusing a buffer is only safe once nothing can
 * still send from it, and Node does not report when a socket is done with one; so a piece comes
 * back only on evidence that its bytes left (see PieceBody), and a piece without that evidence is
 * never reused.
 */

/** Buffers of `pieceSize` bytes lent to one upload's bodies, each to one piece at a time. */
export class PiecePool {
  private readonly free: ArrayBufferLike[] = [];
  private readonly lent = new Set<ArrayBufferLike>();

  constructor(readonly pieceSize: number) {}

  /** A buffer of `n` bytes (at most pieceSize) that nothing else holds. */
  take(n: number): Buffer {
    if (n > this.pieceSize) throw new RangeError(`a piece of ${n} bytes does not fit buffers of ${this.pieceSize}`);
    // allocUnsafeSlow: a buffer of its own, never a slice of Node's shared pool that other code writes into.
    const memory = this.free.pop() ?? Buffer.allocUnsafeSlow(this.pieceSize).buffer;
    this.lent.add(memory);
    return Buffer.from(memory, 0, n);
  }

  /** Takes back the buffer under `piece`; the next take() writes over it. */
  give(piece: Buffer): void {
    if (!this.lent.delete(piece.buffer)) throw new Error('a piece was given back twice, or was not lent by this pool');
    this.free.push(piece.buffer);
  }

  /** Drops a lent piece for good (something may still read it): the collector frees it, never take(). */
  forget(piece: Buffer): void {
    this.lent.delete(piece.buffer);
  }

  /** Buffers lent now (tests). */
  get lentCount(): number {
    return this.lent.size;
  }

  /** Buffers allocated and not dropped (tests). */
  get allocated(): number {
    return this.free.length + this.lent.size;
  }
}

/**
 * A request body of pieces lent by a PiecePool, read one piece ahead, that gives a piece back only
 * when its bytes have left the process:
 * - after the consumer paused this body and then resumed it. undici writes each piece to the
 *   socket as it is handed over, pauses the body when the socket's buffer is full and resumes it on
 *   the socket's 'drain', which Node emits only once every write queued on it has completed; a
 *   piece handed over before that pause was one of them. Pieces handed over after the pause wait
 *   for the next cycle. A consumer that never pauses gets no piece back this way.
 * - when the store has answered the request (`settle(true)`): it read the whole body first.
 * A failed request drops its pieces (`settle(false)`), as the socket may still hold them.
 */
export class PieceBody extends Readable {
  /** Pieces handed to the consumer since its last pause(). */
  private handed: Buffer[] = [];
  /** Pieces handed over before its last pause(): back to the pool at its next resume(). */
  private queued: Buffer[] = [];
  private settled = false;

  constructor(
    private readonly pieces: AsyncIterator<Buffer>,
    private readonly pool: PiecePool,
  ) {
    // One piece read ahead, as Readable.from with the same mark did.
    super({ highWaterMark: 1 });
  }

  override _read(): void {
    this.pieces.next().then(
      (r) => {
        if (r.done === true) this.push(null);
        else this.push(r.value);
      },
      (err: unknown) => this.destroy(err instanceof Error ? err : new Error(String(err))),
    );
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    const closing = this.pieces.return?.();
    if (!closing) return callback(err);
    closing.then(
      () => callback(err),
      (e: unknown) => callback(err ?? (e instanceof Error ? e : new Error(String(e)))),
    );
  }

  // 'data' is the moment the consumer takes a piece (and undici writes it); a chunk pushed while the
  // body is paused waits in the stream's buffer until then, so the push is not that moment.
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'data' && !this.settled) this.handed.push(args[0] as Buffer);
    return super.emit(event, ...args);
  }

  override pause(): this {
    this.queued.push(...this.handed);
    this.handed = [];
    return super.pause();
  }

  override resume(): this {
    const done = this.queued;
    this.queued = [];
    for (const piece of done) this.pool.give(piece);
    return super.resume();
  }

  /** The request is over: `answered` when the store answered it (every byte was read), else failed. */
  settle(answered: boolean): void {
    if (this.settled) return;
    this.settled = true;
    for (const piece of [...this.queued, ...this.handed]) {
      if (answered) this.pool.give(piece);
      else this.pool.forget(piece);
    }
    this.queued = [];
    this.handed = [];
  }
}
