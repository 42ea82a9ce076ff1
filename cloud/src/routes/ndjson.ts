import { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';

export const NDJSON = 'application/x-ndjson';

/**
 * Sends lines as NDJSON, produced one page at a time by `lines`, so a large export never sits in
 * memory whole. `X-Next-Cursor` is set when there is a next page and absent when complete.
 */
export function sendNdjson(reply: FastifyReply, nextCursor: string | null, lines: AsyncIterable<string>): FastifyReply {
  if (nextCursor !== null) void reply.header('X-Next-Cursor', nextCursor);
  return reply.type(NDJSON).send(Readable.from(lines, { objectMode: false }));
}
