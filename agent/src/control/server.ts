import { chmod, rm } from 'node:fs/promises';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import type { Logger } from 'pino';
import { parseBoundedJson } from '@fleet/protocol';
import { NotFoundError, RefusalError } from '../errors.js';
import { ControlRequestSchema, MAX_CONTROL_LINE, type ControlRequest, type ControlResponse } from './protocol.js';

export type ControlHandler = (request: ControlRequest) => Promise<Record<string, unknown>>;

/**
 * Serves the control protocol on a Unix socket (mode 0600: only the robot's own user may
 * drive it). Requests on one connection are answered one at a time, in order.
 */
export class ControlServer {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  constructor(
    private readonly opts: { socketPath: string; handler: ControlHandler; logger: Logger },
  ) {}

  async listen(): Promise<void> {
    const { socketPath } = this.opts;
    if (await isListening(socketPath)) throw new Error(`another agent is already running on ${socketPath}`);
    // A socket file left by a killed agent would make listen fail with EADDRINUSE.
    await rm(socketPath, { force: true });
    const server = createServer((socket) => this.serve(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, () => {
        server.off('error', reject);
        resolve();
      });
    });
    await chmod(socketPath, 0o600);
    this.server = server;
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
    await rm(this.opts.socketPath, { force: true });
  }

  private serve(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    socket.setEncoding('utf8');
    let buffer = '';
    let chain = Promise.resolve();
    socket.on('data', (data: string) => {
      buffer += data;
      if (buffer.length > MAX_CONTROL_LINE && !buffer.includes('\n')) {
        socket.end(`${JSON.stringify({ ok: false, error: { code: 'bad_request', message: 'request line too long' } })}\n`);
        buffer = '';
        return;
      }
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl).trim();
        buffer = buffer.slice(nl + 1);
        if (!line) continue;
        chain = chain.then(async () => {
          const response = await this.answer(line);
          if (!socket.destroyed) socket.write(`${JSON.stringify(response)}\n`);
        });
      }
    });
  }

  private async answer(line: string): Promise<ControlResponse> {
    const bounded = parseBoundedJson(line);
    if (!bounded.ok) return { ok: false, error: { code: 'bad_request', message: `request ${bounded.message === 'not valid JSON' ? 'is not JSON' : bounded.message}` } };
    const json = bounded.value;
    const parsed = ControlRequestSchema.safeParse(json);
    const id = typeof json === 'object' && json !== null && 'id' in json && (typeof json.id === 'string' || typeof json.id === 'number') ? json.id : undefined;
    const withId = id === undefined ? {} : { id };
    if (!parsed.success) {
      return { ...withId, ok: false, error: { code: 'bad_request', message: parsed.error.issues.map((i) => `${i.path.join('.') || 'request'}: ${i.message}`).join('; ') } };
    }
    try {
      return { ...withId, ok: true, result: await this.opts.handler(parsed.data) };
    } catch (err) {
      if (err instanceof RefusalError || err instanceof NotFoundError) return { ...withId, ok: false, error: { code: err.code, message: err.message } };
      this.opts.logger.error({ err, op: parsed.data.op }, 'control request failed');
      return { ...withId, ok: false, error: { code: 'failed', message: (err as Error).message ?? String(err) } };
    }
  }
}

/** Whether something accepts connections on `socketPath`. */
function isListening(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection(socketPath);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
