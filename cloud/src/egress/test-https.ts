/**
 * Test support for outbound HTTPS (not part of the build): a throwaway certificate authority made
 * with the `openssl` CLI, and real HTTPS receivers on 127.0.0.1 that record what they got.
 * Only `*.test.ts` files, benchmarks and the demo import this module.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';

export interface KeyPair {
  key: string;
  cert: string;
}

export interface TestPki {
  /** PEM of the test CA, to trust through `EgressClient({ ca })` or NODE_EXTRA_CA_CERTS. */
  caPem: string;
  /** Path of the CA PEM file. */
  caFile: string;
  /** Issues a server certificate for the given DNS names and IP addresses, signed by the CA. */
  issue(dnsNames: readonly string[], ips?: readonly string[]): KeyPair;
  /** Removes the temporary directory. */
  cleanup(): void;
}

function openssl(args: readonly string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Creates a CA valid for a day, with an EC P-256 key, in a fresh temporary directory. */
export function createTestPki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'egress-pki-'));
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  try {
    openssl(
      ['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=Fleet Egress Test CA',
        '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'],
      dir,
    );
  } catch (err) {
    // No openssl (or a failing one): nobody gets `cleanup()`, so the directory goes now.
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const caFile = join(dir, 'ca.pem');
  let serial = 0;
  return {
    caPem: readFileSync(caFile, 'utf8'),
    caFile,
    issue(dnsNames, ips = []) {
      const name = `server${++serial}`;
      const san = [...dnsNames.map((n) => `DNS:${n}`), ...ips.map((ip) => `IP:${ip}`)].join(',');
      writeFileSync(
        join(dir, `${name}.ext`),
        `subjectAltName=${san}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n`,
      );
      openssl(['req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${dnsNames[0] ?? ips[0] ?? 'test'}`], dir);
      openssl(
        ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-set_serial', String(1000 + serial),
          '-days', '1', '-out', `${name}.pem`, '-extfile', `${name}.ext`],
        dir,
      );
      return { key: readFileSync(join(dir, `${name}.key`), 'utf8'), cert: readFileSync(join(dir, `${name}.pem`), 'utf8') };
    },
    cleanup() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
  /** The TLS SNI name the client sent (false when none). */
  servername: string | false;
}

export interface ReceiverContext {
  /** Sends a TCP RST on every connection of the receiver (an abrupt reset). */
  reset(): void;
}

export type ReceiverHandler = (
  req: ReceivedRequest,
  res: ServerResponse,
  ctx: ReceiverContext,
) => void;

export interface TestReceiver extends AsyncDisposable {
  port: number;
  /** `https://<host>:<port>`; `localhost` by default. */
  origin(host?: string): string;
  /** Every request received, in order. */
  requests: ReceivedRequest[];
  /** Number of TCP connections accepted. */
  connections(): number;
  close(): Promise<void>;
}

/** Starts an HTTPS server on 127.0.0.1 (random port) that reads each body, then calls `handler`. */
export async function startHttpsReceiver(tls: KeyPair, handler: ReceiverHandler): Promise<TestReceiver> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const requests: ReceivedRequest[] = [];
  const ctx: ReceiverContext = {
    reset() {
      for (const socket of sockets) socket.resetAndDestroy();
    },
  };
  const server: Server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const received: ReceivedRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        servername: (req.socket as TLSSocket).servername ?? false,
      };
      requests.push(received);
      handler(received, res, ctx);
    });
  });
  server.on('connection', (socket: Socket) => {
    accepted++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const close = async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return {
    port,
    origin: (host = 'localhost') => `https://${host}:${port}`,
    requests,
    connections: () => accepted,
    close,
    [Symbol.asyncDispose]: close,
  };
}
