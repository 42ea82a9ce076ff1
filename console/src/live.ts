import { useEffect, useRef, useState } from 'preact/hooks';
import { isAuthLost, can, type Session } from './session.js';
import { useConsole } from './ui/context.js';

/** One event of `GET /v1/events/stream`: the webhook payload (or a robot status) as `data`. */
export interface LiveEvent {
  id: string;
  type: string;
  data: Record<string, unknown>;
}

export type LiveState = 'connecting' | 'live' | 'off' | 'failed';

/**
 * The tab's one event stream, shared by every view: the cloud does work per event, not per open
 * page. The typed client's iterator reconnects with the last event id after a drop (a cloud
 * restart loses nothing); views subscribe to the types they show.
 */
export class LiveEvents {
  private readonly listeners = new Set<(e: LiveEvent) => void>();
  private readonly stateListeners = new Set<(s: LiveState) => void>();
  private abort: AbortController | null = null;
  state: LiveState = 'off';
  error: unknown = undefined;

  constructor(
    private readonly session: Session,
    private readonly onAuthLost: (err: unknown) => void,
  ) {}

  /** The families this key may read: episode events with data:read, robot statuses with robots:read or fleet:read. */
  types(): string[] {
    const t: string[] = [];
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
    void (async () => {
      try {
        const stream = this.session.client.events.stream({ types, signal: ac.signal, onOpen: () => this.setState('live') });
        for await (const e of stream) {
          this.setState('live');
          for (const l of this.listeners) l(e as LiveEvent);
        }
      } catch (err) {
        if (ac.signal.aborted) return;
        this.error = err;
        if (isAuthLost(err)) this.onAuthLost(err);
        this.setState('failed');
      }
    })();
  }

  stop(): void {
    this.abort?.abort();
    this.abort = null;
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

/** Calls `fn` for each live event whose type is in `types` (the latest `fn`, without resubscribing). */
export function useLiveEvent(types: readonly string[], fn: (e: LiveEvent) => void): void {
  const { live } = useConsole();
  const ref = useRef(fn);
  ref.current = fn;
  const key = types.join(',');
  useEffect(() => live.subscribe((e) => {
    if (types.includes(e.type)) ref.current(e);
  }),
  [live, key]);
}

export function useLiveState(): LiveState {
  const { live } = useConsole();
  const [s, setS] = useState(live.state);
  useEffect(() => live.onState(setS), [live]);
  return s;
}
