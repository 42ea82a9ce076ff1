import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Session } from '../session.js';
import type { LiveEvents } from '../live.js';

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
