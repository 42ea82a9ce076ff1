import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { isAuthLost } from '../session.js';
import { useConsole } from './context.js';

export interface Async<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
}

/**
 * Runs `load` when `deps` change and on `reload()`; a 401 sends the user back to sign-in. An
 * answer that comes after a newer request started is dropped (typing in a filter).
 */
export function useAsync<T>(load: (signal: AbortSignal) => Promise<T>, deps: readonly unknown[]): Async<T> {
  const { authLost } = useConsole();
  const [state, setState] = useState<{ data: T | undefined; error: unknown; loading: boolean }>({ data: undefined, error: undefined, loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const ac = new AbortController();
    setState((s) => ({ ...s, loading: true }));
    load(ac.signal).then(
      (data) => {
        if (!ac.signal.aborted) setState({ data, error: undefined, loading: false });
      },
      (error: unknown) => {
        if (ac.signal.aborted) return;
        if (isAuthLost(error)) authLost(authMessage(error));
        setState((s) => ({ data: s.data, error, loading: false }));
      },
    );
    return () => ac.abort();
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

export function authMessage(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err);
  return `Your API key no longer works (${msg}). It may have been revoked or have expired; sign in with a valid key.`;
}

/**
 * An action (a button): runs `act`, keeps its result or error for display, and reports a 401 as
 * a lost session. `busy` is true while it runs, so the button can be disabled.
 */
export function useAction<A extends unknown[], T>(act: (...args: A) => Promise<T>): {
  run: (...args: A) => Promise<T | undefined>;
  busy: boolean;
  result: T | undefined;
  error: unknown;
  clear: () => void;
} {
  const { authLost } = useConsole();
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const mounted = useRef(true);
  useEffect(() => () => void (mounted.current = false), []);
  const run = async (...args: A): Promise<T | undefined> => {
    setBusy(true);
    setError(undefined);
    setResult(undefined);
    try {
      const r = await act(...args);
      if (mounted.current) setResult(r);
      return r;
    } catch (err) {
      if (isAuthLost(err)) authLost(authMessage(err));
      if (mounted.current) setError(err);
      return undefined;
    } finally {
      if (mounted.current) setBusy(false);
    }
  };
  return { run, busy, result, error, clear: () => (setResult(undefined), setError(undefined)) };
}

/** Re-renders every `ms` (relative times like "12 s ago"). */
export function useTicker(ms: number): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}
