/**
 * A lock across vitest's worker processes: one holder at a time of `name` within this checkout.
 * It is a Linux abstract-namespace Unix socket bound by the holder: a second bind fails with
 * EADDRINUSE, and the kernel frees the name when the holder closes it or dies (a killed worker
 * leaves no stale lock file behind). The console's browser tests take it, so that their files
 * share the run's two workers with everything else yet never drive two chromiums at once.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import { waitFor } from './wait.js';

const CHECKOUT = fileURLToPath(new URL('../..', import.meta.url));

/** The socket's abstract name: `name` within this checkout (another clone's runs have their own). */
export function exclusiveAddress(name: string): string {
  return `\0fleet-${name}-${createHash('sha256').update(CHECKOUT).digest('hex').slice(0, 16)}`;
}

/** Waits until `name` is free and takes it; disposing gives it back. */
export async function holdExclusive(name: string, opts: { timeoutMs?: number } = {}): Promise<AsyncDisposable> {
  if (process.platform !== 'linux') return { [Symbol.asyncDispose]: async () => undefined };
  const address = exclusiveAddress(name);
  const server = await waitFor(() => tryBind(address), {
    timeoutMs: opts.timeoutMs ?? 10 * 60_000,
    intervalMs: 200,
    description: `the "${name}" lock (held by another test file of this run)`,
  });
  return {
    [Symbol.asyncDispose]: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function tryBind(address: string): Promise<Server | undefined> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(undefined) : reject(err)));
    server.listen({ path: address }, () => {
      // Held, not served: it must not keep a worker alive by itself.
      server.unref();
      resolve(server);
    });
  });
}
