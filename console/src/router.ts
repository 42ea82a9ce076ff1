import { useEffect, useState } from 'preact/hooks';

/**
 * A small history router: the path and query are the page's state (a view can be shared or
 * reloaded; the key is never in it). `navigate` pushes, `replaceQuery` rewrites the query of the
 * current entry (filters typed in a form).
 */
export const BASE = '/console';

const listeners = new Set<() => void>();
function emit(): void {
  for (const l of listeners) l();
}
window.addEventListener('popstate', emit);

export function href(path: string): string {
  return `${BASE}${path.startsWith('/') ? path : `/${path}`}`;
}

export function navigate(path: string, opts: { replace?: boolean } = {}): void {
  const url = path.startsWith(BASE) ? path : href(path);
  if (opts.replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  window.scrollTo(0, 0);
  emit();
}

export function replaceQuery(params: URLSearchParams): void {
  const q = params.toString();
  history.replaceState(null, '', `${location.pathname}${q ? `?${q}` : ''}`);
  emit();
}

export interface Location {
  /** The path inside the console, e.g. `/robots/rbt_1`. */
  path: string;
  query: URLSearchParams;
}

function current(): Location {
  let path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : location.pathname;
  if (path === '' || path === '/') path = '/';
  return { path, query: new URLSearchParams(location.search) };
}

export function useLocation(): Location {
  const [loc, setLoc] = useState(current);
  useEffect(() => {
    const l = () => setLoc(current());
    listeners.add(l);
    // Effects run children first: a page that rewrote its URL while mounting (the review queue
    // adding its new queue id) did so before this listened, so look once more.
    const now = current();
    if (now.path !== loc.path || now.query.toString() !== loc.query.toString()) setLoc(now);
    return () => void listeners.delete(l);
  }, []);
  return loc;
}

/** Matches `/robots/:id` against a path; the parameters come back decoded. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split('/');
  const s = path.split('/');
  if (p.length !== s.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < p.length; i++) {
    const part = p[i]!;
    if (part.startsWith(':')) {
      try {
        params[part.slice(1)] = decodeURIComponent(s[i]!);
      } catch {
        return null;
      }
    } else if (part !== s[i]) return null;
  }
  return params;
}
