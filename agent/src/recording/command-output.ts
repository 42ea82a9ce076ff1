import type { Readable } from 'node:stream';
import type { Logger } from 'pino';

/** How much of the end of a program's output is kept for `recorder_exit.output_tail`. */
export const OUTPUT_TAIL_BYTES = 1024;
/** A line longer than this is logged in pieces, so a program that prints no newline costs no more. */
const MAX_LINE_BYTES = 8 * 1024;

interface StreamState {
  name: string;
  pending: Buffer[];
  pendingBytes: number;
  ended: boolean;
}

/**
 * A recorder program's stdout and stderr into the agent's log: one log line per line of output
 * (at info, with the episode and the stream), at most `maxBytes` of output per episode (newlines
 * included), then one line saying how much was not logged. Memory stays bounded whatever the
 * program prints: a partial line of at most 8 KiB per stream and the last 1 KiB as the tail.
 */
export class RecorderOutput {
  private readonly streams: StreamState[] = [];
  private consumed = 0;
  private dropped = 0;
  private full = false;
  private last = Buffer.alloc(0);
  private drained: (() => void) | undefined;
  private closed = false;

  constructor(private readonly opts: { logger: Logger; episodeId: string; maxBytes: number }) {}

  /** Reads `stream` (named `stdout` or `stderr` in the log) until it ends. */
  attach(stream: Readable, name: string): void {
    const state: StreamState = { name, pending: [], pendingBytes: 0, ended: false };
    this.streams.push(state);
    stream.on('data', (chunk: Buffer) => this.take(state, chunk));
    const ended = () => {
      if (state.ended) return;
      state.ended = true;
      this.flush(state);
      if (this.streams.every((s) => s.ended)) this.drained?.();
    };
    stream.once('end', ended);
    stream.once('close', ended);
    stream.once('error', ended);
  }

  /** Calls `done` once every attached stream has ended (at once if they have). */
  whenDrained(done: () => void): void {
    if (this.streams.every((s) => s.ended)) done();
    else this.drained = done;
  }

  /** No more output is taken: the partial lines are logged, then the note of what was dropped. */
  end(): void {
    if (this.closed) return;
    for (const s of this.streams) this.flush(s);
    this.closed = true;
    if (this.dropped > 0) {
      this.opts.logger.warn(
        { episode_id: this.opts.episodeId, dropped_bytes: this.dropped, output_max_bytes: this.opts.maxBytes },
        `recorder output over ${this.opts.maxBytes} bytes: ${this.dropped} bytes not logged`,
      );
    }
  }

  /** The last ~1 KiB of output, both streams as they arrived. */
  tail(): string {
    return this.last.toString('utf8');
  }

  private take(s: StreamState, chunk: Buffer): void {
    if (this.closed) return;
    this.keepTail(chunk);
    let at = 0;
    while (at < chunk.length) {
      if (this.full) {
        this.dropped += chunk.length - at;
        return;
      }
      const nl = chunk.indexOf(0x0a, at);
      if (nl === -1) {
        s.pending.push(Buffer.from(chunk.subarray(at)));
        s.pendingBytes += chunk.length - at;
        // A line too long to wait for is logged in pieces; the rest waits for its newline.
        if (s.pendingBytes >= MAX_LINE_BYTES) {
          const whole = Buffer.concat(s.pending, s.pendingBytes);
          const cut = whole.length - (whole.length % MAX_LINE_BYTES);
          s.pending = cut < whole.length ? [whole.subarray(cut)] : [];
          s.pendingBytes = whole.length - cut;
          this.emit(s.name, whole.subarray(0, cut), 0);
        }
        return;
      }
      s.pending.push(chunk.subarray(at, nl));
      s.pendingBytes += nl - at;
      this.emit(s.name, this.takePending(s), 1);
      at = nl + 1;
    }
  }

  /** Logs the stream's partial line, if any. */
  private flush(s: StreamState): void {
    if (s.pendingBytes > 0) this.emit(s.name, this.takePending(s), 0);
  }

  private takePending(s: StreamState): Buffer {
    const line = Buffer.concat(s.pending, s.pendingBytes);
    s.pending = [];
    s.pendingBytes = 0;
    return line;
  }

  /**
   * Logs `line` (and counts `newline` bytes after it), in pieces of at most 8 KiB, while the
   * budget lasts; what does not fit is counted as dropped, and so is everything after it.
   */
  private emit(stream: string, line: Buffer, newline: number): void {
    for (let at = 0; at < line.length || (at === 0 && newline > 0); at += MAX_LINE_BYTES) {
      const piece = line.subarray(at, at + MAX_LINE_BYTES);
      const cost = piece.length + (at + MAX_LINE_BYTES >= line.length ? newline : 0);
      if (this.full || this.consumed + cost > this.opts.maxBytes) {
        this.full = true;
        this.dropped += line.length - at + newline;
        return;
      }
      this.consumed += cost;
      const text = piece.toString('utf8').replace(/\r$/, '');
      if (text !== '') this.opts.logger.info({ episode_id: this.opts.episodeId, stream }, text);
    }
  }

  private keepTail(chunk: Buffer): void {
    const joined = chunk.length >= OUTPUT_TAIL_BYTES ? chunk.subarray(chunk.length - OUTPUT_TAIL_BYTES) : Buffer.concat([this.last, chunk]);
    // A copy, so the tail never holds on to a large chunk.
    this.last = Buffer.from(joined.subarray(Math.max(0, joined.length - OUTPUT_TAIL_BYTES)));
  }
}
