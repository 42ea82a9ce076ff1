import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import { Agent } from 'undici';

/**
 * The HTTP agent uploads go through. Without an extra CA it is Node's default trust: the bundled
 * roots (system CAs with --use-system-ca / --use-openssl-ca) plus NODE_EXTRA_CA_CERTS, which
 * Node loads at start. With `caFile` (customer storage on premises behind its own CA) the list
 * is rebuilt explicitly, since a `ca` option replaces the default: bundled roots, the file named
 * by NODE_EXTRA_CA_CERTS (handed over by the CLI, never read from the environment here) and the
 * CA file. Upload URLs may point at any address the robot can reach, private ones included.
 */
export function uploadDispatcher(opts: { caFile?: string | undefined; extraCaCertsFile?: string | undefined; connections?: number }): Agent {
  const connect: { ca?: string[] } = {};
  if (opts.caFile) {
    const ca = [...rootCertificates];
    if (opts.extraCaCertsFile) {
      try {
        ca.push(readFileSync(opts.extraCaCertsFile, 'utf8'));
      } catch {
        // Node itself only warns about an unreadable NODE_EXTRA_CA_CERTS; do the same by ignoring it.
      }
    }
    ca.push(readFileSync(opts.caFile, 'utf8'));
    connect.ca = ca;
  }
  return new Agent({ connect, connections: opts.connections ?? 8, keepAliveTimeout: 10_000 });
}
