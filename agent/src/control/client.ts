import { createConnection, type Socket } from 'node:net';
import { join } from 'node:path';
import type { EpisodeView } from '../episodes-view.js';
import type { OperatorContext, OperatorContextPatch } from '../rules/operator-context.js';
import type { ControlRequest, ControlResponse } from './protocol.js';
import { ControlError } from '../errors.js';

export const CONTROL_SOCKET_FILE = 'agent.sock';

export function controlSocketPath(dataDir: string): string {
  return join(dataDir, CONTROL_SOCKET_FILE);
}

type RequestBody = ControlRequest extends infer R ? (R extends { op: string } ? Omit<R, 'id'> : never) : never;

/**
 * A connection to a running agent's control socket: what the headset, the buttons and the CLI
 * use. Requests are answered in order.
 */
export class ControlClient {
  private buffer = '';
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (r: ControlResponse) => void; reject: (e: Error) => void }>();

  private constructor(private readonly socket: Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => this.onData(d));
    socket.on('close', () => this.failAll(new ControlError('not_running', 'the agent closed the control connection')));
    socket.on('error', () => undefined);
  }

  /** Connects to `socketPath`; throws `ControlError('not_running')` when no agent listens there. */
  static connect(socketPath: string): Promise<ControlClient> {
    return new Promise((resolve, reject) => {
      const socket = createConnection(socketPath);
      socket.once('connect', () => resolve(new ControlClient(socket)));
      socket.once('error', (err: NodeJS.ErrnoException) =>
        reject(new ControlError('not_running', `no agent is running on ${socketPath} (${err.code ?? err.message}); start it with fleet-agent start`)),
      );
    });
  }

  /** Sends one request and resolves with the raw response. */
  request(body: RequestBody): Promise<ControlResponse> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.socket.write(`${JSON.stringify({ ...body, id })}\n`);
    });
  }

  /** Sends one request; resolves with its result or throws a {@link ControlError}. */
  async call(body: RequestBody): Promise<Record<string, unknown>> {
    const r = await this.request(body);
    if (!r.ok) throw new ControlError(r.error.code, r.error.message);
    return r.result;
  }

  episode(verb: 'start' | 'finish' | 'fail' | 'discard'): Promise<Record<string, unknown>> {
    return this.call({ op: `episode.${verb}` });
  }

  async setContext(context: OperatorContextPatch): Promise<OperatorContext> {
    return (await this.call({ op: 'context.set', context })).context as OperatorContext;
  }

  async getContext(): Promise<OperatorContext> {
    return (await this.call({ op: 'context.get' })).context as OperatorContext;
  }

  status(): Promise<Record<string, unknown>> {
    return this.call({ op: 'status' });
  }

  /** The newest episodes (default 50), each with its directory, files and sync state. */
  async listEpisodes(limit?: number): Promise<EpisodeView[]> {
    return (await this.call({ op: 'episodes.list', ...(limit !== undefined ? { limit } : {}) })).episodes as EpisodeView[];
  }

  /** One episode; throws `ControlError('not_found')` for an id this robot does not have. */
  async showEpisode(episodeId: string): Promise<EpisodeView> {
    return (await this.call({ op: 'episodes.show', episode_id: episodeId })).episode as EpisodeView;
  }

  /** The agent's figures in Prometheus text. */
  async metrics(): Promise<string> {
    return String((await this.call({ op: 'metrics' })).text);
  }

  close(): void {
    this.socket.end();
  }

  private onData(d: string): void {
    this.buffer += d;
    let nl: number;
    while ((nl = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, nl);
      this.buffer = this.buffer.slice(nl + 1);
      let response: ControlResponse;
      try {
        response = JSON.parse(line) as ControlResponse;
      } catch {
        continue;
      }
      const id = typeof response.id === 'number' ? response.id : undefined;
      const w = id !== undefined ? this.waiting.get(id) : this.waiting.values().next().value;
      if (!w) continue;
      this.waiting.delete(id ?? [...this.waiting.keys()][0]!);
      w.resolve(response);
    }
  }

  private failAll(err: Error): void {
    for (const w of this.waiting.values()) w.reject(err);
    this.waiting.clear();
  }
}

/** Connects, sends one request, closes. */
export async function controlCall(socketPath: string, body: RequestBody): Promise<ControlResponse> {
  const client = await ControlClient.connect(socketPath);
  try {
    return await client.request(body);
  } finally {
    client.close();
  }
}
