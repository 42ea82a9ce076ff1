import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { eventFrame, SseConnection } from './sse.js';

/** A response whose socket takes nothing: what is written stays buffered until `drain()`. */
class StalledResponse extends EventEmitter {
  head: { status: number; headers: Record<string, unknown> } | null = null;
  written = '';
  writableLength = 0;
  writableNeedDrain = false;
  destroyed = false;
  ended = false;
  writeHead(status: number, headers: Record<string, unknown>): this {
    this.head = { status, headers };
    return this;
  }
  write(text: string): boolean {
    this.written += text;
    this.writableLength += Buffer.byteLength(text);
    this.writableNeedDrain = this.writableLength > 16 * 1024;
    return !this.writableNeedDrain;
  }
  drain(): void {
    this.writableLength = 0;
    this.writableNeedDrain = false;
    this.emit('drain');
  }
  end(): void {
    this.ended = true;
    this.emit('close');
  }
  destroy(): void {
    this.destroyed = true;
    this.emit('close');
  }
}

const open = (maxBuffered = 1024 * 1024) => {
  const res = new StalledResponse();
  const conn = new SseConnection(res as unknown as ServerResponse, maxBuffered);
  return { res, conn };
};

describe('SseConnection', () => {
  it('sends the head and retry first, nothing before them, and frames after', () => {
    const { res, conn } = open();
    expect(conn.send('early\n\n')).toBe(true);
    expect(res.written).toBe('');
    conn.start({ 'x-request-id': 'req_1' }, 2000);
    expect(res.head).toEqual({
      status: 200,
      headers: { 'x-request-id': 'req_1', 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache, no-transform', 'x-accel-buffering': 'no' },
    });
    conn.send(eventFrame('evt_7', 'robot.status', '{"a":1}'));
    conn.heartbeat();
    expect(res.written).toBe('retry: 2000\n\nid: evt_7\nevent: robot.status\ndata: {"a":1}\n\n: heartbeat\n\n');
  });

  it('drops a reader whose unsent output passes the bound, and tells who listens', () => {
    const { res, conn } = open(64 * 1024);
    let closed = 0;
    conn.onClose(() => closed++);
    conn.start({}, 2000);
    const frame = eventFrame('evt_1', 'episode.finalized', JSON.stringify({ pad: 'x'.repeat(1000) }));
    let sent = 0;
    while (conn.send(frame)) sent++;
    expect(sent).toBeGreaterThan(50);
    expect(res.destroyed).toBe(true);
    expect(conn.closed).toBe(true);
    expect(closed).toBe(1);
    expect(conn.send(frame)).toBe(false);
  });

  it('waits for a drain, and ends cleanly when all went out or by cutting the connection when not', async () => {
    const { res, conn } = open();
    conn.start({}, 2000);
    conn.send('x'.repeat(20 * 1024));
    let drained = false;
    const waiting = conn.drained().then(() => (drained = true));
    await Promise.resolve();
    expect(drained).toBe(false);
    res.drain();
    await waiting;
    conn.end();
    expect([res.ended, res.destroyed]).toEqual([true, false]);

    const stalled = open();
    stalled.conn.start({}, 2000);
    stalled.conn.end();
    expect([stalled.res.ended, stalled.res.destroyed]).toEqual([false, true]);
  });

  it('writes a payload with a line break as several data lines', () => {
    expect(eventFrame('evt_3', 'x', 'a\nb\r\nc')).toBe('id: evt_3\nevent: x\ndata: a\ndata: b\ndata: c\n\n');
  });
});
