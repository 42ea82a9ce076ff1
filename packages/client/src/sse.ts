import { FleetStreamError } from './errors.js';

/** One dispatched server-sent event. */
export interface SseMessage {
  /** The last event id the stream set (it carries over to later events, as in the HTML standard). */
  id: string | undefined;
  /** `event:`; `message` when the frame names none. */
  event: string;
  /** The `data:` lines joined with line feeds. */
  data: string;
}

export interface SseReadOptions {
  /** Told of each valid `retry:` field (the server's reconnection delay, ms). */
  onRetry?: (ms: number) => void;
  /**
   * Told of a last event id set by a block without data: a position, not an event (the stream's
   * start). Events with data are yielded with their id instead.
   */
  onId?: (id: string) => void;
  /** Told of each comment line (without the colon), e.g. heartbeats. */
  onComment?: (text: string) => void;
  /** Longest line, and longest data of one event, in characters (default 16 Mi). */
  maxLength?: number;
  /**
   * Ends the reading (cleanly) when it aborts. A fetch's own signal should error its body, but
   * not every implementation does so for a body a reader holds; cancelling the reader always ends it.
   */
  signal?: AbortSignal;
}

const DEFAULT_MAX_LENGTH = 16 * 1024 * 1024;

/**
 * Parses a `text/event-stream` body as it arrives, as the HTML standard's event-stream
 * interpretation does: lines end with CRLF, LF or CR (also split across chunks), `:` starts a
 * comment, a field's value loses one leading space, `data:` lines are joined with LF, a blank line
 * dispatches (nothing when there was no data), an unfinished event at the end is dropped. Runs in
 * browsers and Node alike (WHATWG streams and TextDecoder only).
 */
export async function* readSse(body: ReadableStream<Uint8Array>, opts: SseReadOptions = {}): AsyncGenerator<SseMessage> {
  const maxLength = opts.maxLength ?? DEFAULT_MAX_LENGTH;
  const decoder = new TextDecoder('utf-8');
  const reader = body.getReader();
  const onAbort = () => void reader.cancel().catch(() => undefined);
  if (opts.signal?.aborted) onAbort();
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  let buffer = '';
  let first = true;
  // The last chunk ended with CR: a LF opening the next one belongs to the same line end.
  let skipLf = false;
  let lastId: string | undefined;
  let idSet = false;
  let eventType = '';
  let data: string[] = [];
  let dataLength = 0;

  const line = (text: string): SseMessage | null => {
    if (text === '') {
      const type = eventType;
      eventType = '';
      const newId = idSet;
      idSet = false;
      if (data.length === 0) {
        if (newId && lastId !== undefined) opts.onId?.(lastId);
        return null;
      }
      const joined = data.join('\n');
      data = [];
      dataLength = 0;
      return { id: lastId, event: type === '' ? 'message' : type, data: joined };
    }
    if (text.startsWith(':')) {
      opts.onComment?.(text.slice(1).replace(/^ /, ''));
      return null;
    }
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    const value = colon < 0 ? '' : text.slice(colon + 1).replace(/^ /, '');
    switch (field) {
      case 'event':
        eventType = value;
        break;
      case 'data':
        dataLength += value.length + 1;
        if (dataLength > maxLength) throw new FleetStreamError('line_too_long', `an event's data is longer than ${maxLength} characters`);
        data.push(value);
        break;
      case 'id':
        if (!value.includes('\0')) {
          lastId = value;
          idSet = true;
        }
        break;
      case 'retry':
        if (/^[0-9]+$/.test(value)) opts.onRetry?.(Number(value));
        break;
      default:
      // Unknown fields are ignored.
    }
    return null;
  };

  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      let text = decoder.decode(value, { stream: true });
      if (first && text.length > 0) {
        if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
        first = false;
      }
      if (skipLf && text.length > 0) {
        if (text[0] === '\n') text = text.slice(1);
        skipLf = false;
      }
      buffer += text;
      let start = 0;
      for (;;) {
        let end = start;
        while (end < buffer.length && buffer[end] !== '\n' && buffer[end] !== '\r') end++;
        if (end === buffer.length) break;
        const ending = buffer[end];
        let next = end + 1;
        if (ending === '\r') {
          if (next < buffer.length) {
            if (buffer[next] === '\n') next++;
          } else {
            skipLf = true;
          }
        }
        const msg = line(buffer.slice(start, end));
        start = next;
        if (msg) yield msg;
      }
      buffer = buffer.slice(start);
      if (buffer.length > maxLength) throw new FleetStreamError('line_too_long', `a stream line is longer than ${maxLength} characters`);
    }
  } finally {
    opts.signal?.removeEventListener('abort', onAbort);
    // Leaving early (break, throw, abort) cancels the download.
    await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}
