/**
 * The broker both sides of bench/commands.ts's latency comparison run over: a bare aedes (the
 * version the cloud embeds), no authentication, in its own process. The cloud uses it through
 * --mqtt-url, the simulated robots enroll onto it, and the raw mqtt.js baseline uses it too.
 * Prints `{"mqtt":"mqtt://127.0.0.1:PORT"}` once it listens; SIGTERM closes it.
 *
 * `--nodelay` sets TCP_NODELAY on the broker's sockets. The cloud's embedded broker does not
 * (neither do mqtt.js clients by default), so that variant only serves the "what the round trip
 * could be" row.
 */
import { createRequire } from 'node:module';
import { createServer, type AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import type * as AedesModule from 'aedes';

// Resolved from the cloud workspace, so this is the same aedes as the cloud's embedded broker.
const fromCloud = createRequire(new URL('../cloud/package.json', import.meta.url));
const { Aedes } = (await import(pathToFileURL(fromCloud.resolve('aedes')).href)) as typeof AedesModule;

const aedes = await Aedes.createBroker();
const server = createServer({ noDelay: process.argv.includes('--nodelay') }, aedes.handle);
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
process.stdout.write(`${JSON.stringify({ mqtt: `mqtt://127.0.0.1:${(server.address() as AddressInfo).port}` })}\n`);

const stop = () => {
  aedes.close(() => server.close(() => process.exit(0)));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
