import { readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { systemClock, type Clock } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { GrantProviderConfig } from './config.js';
import { createS3UploadStore } from './s3-store.js';
import { buildGrantProviderServer } from './server.js';

export interface RunningGrantProvider {
  /** `https://host:port` (or `http://` with `insecureHttp`), with the port actually bound. */
  url: string;
  close(): Promise<void>;
}

/** Reads the TLS files, opens the S3 client and listens: the `fleet-sim grant-provider` command. */
export async function runGrantProvider(config: GrantProviderConfig, deps: { logger: Logger; clock?: Clock }): Promise<RunningGrantProvider> {
  const tls = config.tlsCertFile && config.tlsKeyFile ? { cert: await readFile(config.tlsCertFile), key: await readFile(config.tlsKeyFile) } : undefined;
  const store = createS3UploadStore(config);
  const server = buildGrantProviderServer(config, { store, logger: deps.logger, clock: deps.clock ?? systemClock, ...(tls ? { tls } : {}) });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(config.port, config.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    store.close();
    throw err;
  }
  const { address, port } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  return {
    url: `${config.insecureHttp ? 'http' : 'https'}://${host}:${port}`,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      store.close();
    },
  };
}
