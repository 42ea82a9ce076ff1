import type { FastifyBaseLogger } from 'fastify';
import type { AddressInfo } from 'node:net';
import { systemClock, type Clock } from '@fleet/protocol';
import { buildApp, type CloudApp } from './app.js';
import { bootstrapIfEmpty, type Bootstrapped } from './bootstrap.js';
import type { CloudConfig } from './config.js';
import { startEmbeddedBroker, type EmbeddedBroker } from './mqtt/broker.js';
import { loadSecretBox } from './secret-box.js';
import { openSqliteStore } from './store/index.js';
import type { Store } from './store/index.js';

export interface RunningCloud {
  http: string;
  mqtt: string;
  store: Store;
  app: CloudApp;
  broker: EmbeddedBroker | null;
  bootstrapped: Bootstrapped | null;
  /** Stops accepting, lets in-flight requests finish, then closes the broker and the database. */
  close(): Promise<void>;
}

/** Everything `fleet-cloud serve` runs, in one process. */
export async function startCloud(config: CloudConfig, opts: { clock?: Clock; logger?: FastifyBaseLogger } = {}): Promise<RunningCloud> {
  const clock = opts.clock ?? systemClock;
  const store = openSqliteStore(config.dataDir);
  let broker: EmbeddedBroker | null = null;
  let app: CloudApp | null = null;
  try {
    const bootstrapped = await bootstrapIfEmpty(store, clock, config.dataDir);
    if (!config.mqttUrl) broker = await startEmbeddedBroker({ host: config.host, port: config.mqttPort });
    const brokerRef = broker;
    app = await buildApp(config, {
      store,
      secrets: loadSecretBox(config.dataDir, config.secretKey),
      clock,
      ...(opts.logger ? { logger: opts.logger } : {}),
      readiness: async () => {
        if (brokerRef?.aedes.closed) throw new Error('MQTT broker closed');
      },
    });
    await app.app.listen({ host: config.host, port: config.httpPort });
    const addr = app.app.server.address() as AddressInfo;
    const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
    const shownHost = host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host;
    const running = app;
    return {
      http: `http://${shownHost}:${addr.port}`,
      mqtt: broker ? broker.url : config.mqttUrl!,
      store,
      app: running,
      broker,
      bootstrapped,
      async close() {
        await running.close();
        await brokerRef?.close();
        await store.close();
      },
    };
  } catch (err) {
    await app?.close().catch(() => undefined);
    await broker?.close().catch(() => undefined);
    await store.close();
    throw err;
  }
}
