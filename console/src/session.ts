import { FleetApiError, FleetClient } from '@fleet/client';

/**
 * The signed-in key and what it may do. The key lives only in this tab's sessionStorage (gone
 * when the tab closes, never in localStorage, a URL or a log line) and in the Authorization
 * header of requests to the same origin.
 */
export interface Session {
  client: FleetClient;
  keyId: string;
  keyName: string;
  scopes: ReadonlySet<string>;
  tier: string;
  features: Readonly<Record<string, boolean>>;
}

const STORAGE_KEY = 'fleet-console.api-key';

export function storedKey(): string | null {
  try {
    return sessionStorage.getItem(STORAGE_KEY);
  } catch {
    return null;
  }
}

export function forgetKey(): void {
  try {
    sessionStorage.removeItem(STORAGE_KEY);
  } catch {
    // Storage disabled: there is nothing to forget.
  }
}

export function makeClient(apiKey: string): FleetClient {
  // Same origin as the console; retries as the typed client does (GETs and keyed POSTs).
  return new FleetClient({ baseUrl: window.location.origin, apiKey });
}

/** Checks the key against the API (any valid key may read its entitlements) and keeps it for this tab. */
export async function openSession(apiKey: string): Promise<Session> {
  const client = makeClient(apiKey);
  const ent = await client.entitlements();
  try {
    sessionStorage.setItem(STORAGE_KEY, apiKey);
  } catch {
    // Without storage the session lasts until the page reloads.
  }
  return { client, keyId: ent.key.id, keyName: ent.key.name, scopes: new Set(ent.key.scopes), tier: ent.tier, features: ent.features };
}

export type Scope = 'robots:read' | 'fleet:read' | 'robots:command' | 'data:read' | 'data:write' | 'admin';

/** `admin` holds every other scope; a list means any one of them. */
export function can(session: Session, scope: Scope | readonly Scope[]): boolean {
  if (session.scopes.has('admin')) return true;
  const wanted = typeof scope === 'string' ? [scope] : scope;
  return wanted.some((s) => session.scopes.has(s));
}

/** Words for a missing scope, shown next to a disabled action. */
export function needs(scope: Scope | readonly Scope[]): string {
  return `needs the scope ${typeof scope === 'string' ? scope : scope.join(' or ')}`;
}

/** A 401 means the key no longer works (revoked, expired): the console returns to sign-in. */
export function isAuthLost(err: unknown): boolean {
  return err instanceof FleetApiError && err.status === 401;
}
