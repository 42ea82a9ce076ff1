import { createContext } from 'preact';
import { useContext, useEffect, useRef, useState } from 'preact/hooks';
import type { Session } from '../session.js';
import type { LiveEvent, LiveEvents, LiveState } from '../live.js';

export interface ConsoleContext {
  session: Session;
  live: LiveEvents;
  /** The key stopped working (401): back to sign-in with this message, keeping the page's URL. */
  authLost: (message: string) => void;
}

export const Ctx = createContext<ConsoleContext | null>(null);

export function useConsole(): ConsoleContext {
  const c = useContext(Ctx);
  if (!c) throw new Error('useConsole outside the signed-in console');
  return c;
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
