import { FleetStreamError } from './errors.js';

/** The longest NDJSON line read by default, in characters: 16 Mi (an episode line with 10,000 files is far less). */
export const DEFAULT_MAX_LINE_LENGTH = 16 * 1024 * 1024;

/**
 * Parses an NDJSON body line by line as it arrives, never holding more than one line (at most
 * `maxLineLength` characters) and the chunk being split. Empty lines are skipped.
 */
export async function* readNdjson<T = unknown>(body: ReadableStream<Uint8Array> | null, maxLineLength = DEFAULT_MAX_LINE_LENGTH): AsyncGenerator<T> {
  if (!body) return;
  const decoder = new TextDecoder('utf-8', { fatal: true });
  let pending = '';
  const parse = (line: string): T => {
    // Plain JSON.parse (iterative in V8): the server may serve values stored before its bounds.
    try {
      return JSON.parse(line) as T;
    } catch {
      throw new FleetStreamError('invalid_json', 'a stream line is not valid JSON');
    }
  };
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      pending += done ? decoder.decode() : decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = pending.indexOf('\n')) !== -1) {
        const line = pending.slice(0, nl).replace(/\r$/, '');
        pending = pending.slice(nl + 1);
        if (line.trim() !== '') yield parse(line);
      }
      if (pending.length > maxLineLength) throw new FleetStreamError('line_too_long', `a stream line is longer than ${maxLineLength} characters`);
      if (done) break;
    }
    if (pending.trim() !== '') yield parse(pending);
  } finally {
    // Leaving the loop early (break, throw) cancels the download.
    await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}
