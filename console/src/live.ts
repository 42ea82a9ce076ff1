import type { FleetEventType } from '@fleet/client';
import { isAuthLost, can, type Session } from './session.js';

/** One event of `GET /v1/events/stream`: the webhook payload (or a robot status) as `data`. */
export interface LiveEvent {
  id: string;
  type: string;
  data: Record<string, unknown>;
}

export type LiveState = 'connecting' | 'live' | 'off' | 'failed';

/**
 * The browser's one event stream per key, shared by every view and every tab: the cloud does
 * work per event, not per open page, and a browser allows only six HTTP/1.1 connections to one
 * origin, so a stream per tab would stall the seventh tab. The tab holding a Web Lock named after
 * the key streams and posts each event on a BroadcastChannel; the other tabs listen. When that tab
 * closes, the lock passes to a waiting tab, which resumes from the last event id it heard, so
 * nothing is lost. The typed client's iterator reconnects with the last event id after a drop (a
 * cloud restart loses nothing).
 */
export class LiveEvents {
  private readonly listeners = new Set<(e: LiveEvent) => void>();
  private readonly stateListeners = new Set<(s: LiveState) => void>();
  private abort: AbortController | null = null;
  private channel: BroadcastChannel | null = null;
  private lastId: string | undefined;
  private leading = false;
  state: LiveState = 'off';
  error: unknown = undefined;

  constructor(
    private readonly session: Session,
    private readonly onAuthLost: (err: unknown) => void,
  ) {}

  /** The families this key may read: episode events with data:read, robot statuses with robots:read or fleet:read. */
  types(): FleetEventType[] {
    const t: FleetEventType[] = [];
    if (can(this.session, 'data:read')) t.push('episode.finalized', 'episode.synced', 'episode.verified', 'episode.failed', 'episode.pruned');
    if (can(this.session, ['robots:read', 'fleet:read'])) t.push('robot.status');
    return t;
  }

  start(): void {
    const types = this.types();
    if (this.abort || types.length === 0) return;
    const ac = new AbortController();
    this.abort = ac;
    this.setState('connecting');
    const name = `fleet-console-events:${this.session.keyId}`;
    const locks = typeof navigator !== 'undefined' ? navigator.locks : undefined;
    if (!locks || typeof BroadcastChannel === 'undefined') {
      void this.stream(types, ac.signal, null);
      return;
    }
    const channel = new BroadcastChannel(name);
    this.channel = channel;
    channel.onmessage = (m: MessageEvent<{ kind: 'event'; event: LiveEvent } | { kind: 'state'; state: LiveState } | { kind: 'hello' }>) => {
      if (m.data.kind === 'event') this.deliver(m.data.event);
      else if (m.data.kind === 'state') this.setState(m.data.state === 'failed' ? 'connecting' : m.data.state);
      // A tab that just opened asks how the stream is doing.
      else if (this.leading) channel.postMessage({ kind: 'state', state: this.state });
    };
    channel.postMessage({ kind: 'hello' });
    locks
      .request(name, { signal: ac.signal }, async () => {
        this.leading = true;
        try {
          await this.stream(types, ac.signal, channel);
        } finally {
          this.leading = false;
        }
      })
      .catch(() => undefined);
  }

  private async stream(types: FleetEventType[], signal: AbortSignal, channel: BroadcastChannel | null): Promise<void> {
    const announce = (s: LiveState) => {
      this.setState(s);
      channel?.postMessage({ kind: 'state', state: s });
    };
    try {
      const events = this.session.client.events.stream({
        types,
        signal,
        ...(this.lastId !== undefined ? { lastEventId: this.lastId } : {}),
        onOpen: () => announce('live'),
        onReconnect: () => announce('connecting'),
      });
      for await (const e of events) {
        const event = e as LiveEvent;
        channel?.postMessage({ kind: 'event', event });
        this.deliver(event);
      }
    } catch (err) {
      if (signal.aborted) return;
      this.error = err;
      if (isAuthLost(err)) this.onAuthLost(err);
      announce('failed');
    }
  }

  private deliver(e: LiveEvent): void {
    this.lastId = e.id;
    for (const l of this.listeners) l(e);
  }

  stop(): void {
    this.abort?.abort();
    this.abort = null;
    this.channel?.close();
    this.channel = null;
    this.setState('off');
  }

  subscribe(fn: (e: LiveEvent) => void): () => void {
    this.listeners.add(fn);
    return () => void this.listeners.delete(fn);
  }

  onState(fn: (s: LiveState) => void): () => void {
    this.stateListeners.add(fn);
    return () => void this.stateListeners.delete(fn);
  }

  private setState(s: LiveState): void {
    if (this.state === s) return;
    this.state = s;
    for (const l of this.stateListeners) l(s);
  }
}
