import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

/**
 * One server-sent-events answer on a raw Node response (the route hijacks the reply): the head
 * and the `retry:` line go out at once, then frames as they come. Output the client does not
 * read is bounded: past `maxBufferedBytes` of unsent output the connection is dropped (the
 * client resumes with Last-Event-ID), so a slow reader never holds the cloud's memory.
 */
export class SseConnection {
  private started = false;
  private ended = false;
  private readonly closeListeners: (() => void)[] = [];

  constructor(
    private readonly res: ServerResponse,
    private readonly maxBufferedBytes: number,
  ) {
    res.once('close', () => {
      this.ended = true;
      for (const listener of this.closeListeners.splice(0)) listener();
    });
  }

  /** Sends the head (200, text/event-stream, no caching or proxy buffering) and the client's reconnection delay. */
  start(headers: OutgoingHttpHeaders, retryMs: number): void {
    if (this.ended) return;
    this.started = true;
    this.res.writeHead(200, {
      ...headers,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
    });
    this.send(`retry: ${retryMs}\n\n`);
  }

  /** Writes `text`; false when the connection is gone or was just dropped as too slow. Nothing goes out before the head. */
  send(text: string): boolean {
    if (this.ended) return false;
    if (!this.started) return true;
    this.res.write(text);
    if (this.res.writableLength > this.maxBufferedBytes) {
      this.drop();
      return false;
    }
    return true;
  }

  heartbeat(): void {
    this.send(': heartbeat\n\n');
  }

  /** Unsent output, in bytes. */
  get buffered(): number {
    return this.res.writableLength;
  }

  get closed(): boolean {
    return this.ended;
  }

  /** Resolves once the output has drained, or the connection closed. */
  drained(): Promise<void> {
    if (this.ended || !this.res.writableNeedDrain) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.res.off('drain', done);
        resolve();
      };
      this.res.once('drain', done);
      this.closeListeners.push(done);
    });
  }

  onClose(listener: () => void): void {
    if (this.ended) listener();
    else this.closeListeners.push(listener);
  }

  /**
   * Ends the answer (the app is closing): cleanly when everything written has gone out, else by
   * dropping the connection, so that a reader who stopped reading cannot hold the close.
   */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.started || this.res.writableLength > 0) this.res.destroy();
    else this.res.end();
  }

  /** A reader too slow for the bound: the socket goes, unsent output with it. */
  private drop(): void {
    this.ended = true;
    this.res.destroy();
  }
}

/** One event as an SSE frame (`id` the event's wire id). The payload is JSON on one line; a line break in it would still make valid `data:` lines. */
export function eventFrame(id: string, type: string, payload: string): string {
  const data = /[\r\n]/.test(payload) ? payload.split(/\r\n|\r|\n/).join('\ndata: ') : payload;
  return `id: ${id}\nevent: ${type}\ndata: ${data}\n\n`;
}
