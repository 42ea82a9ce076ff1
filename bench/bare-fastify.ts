/**
 * The baseline for bench/api.ts: a bare Fastify (the version the cloud workspace depends on)
 * answering GET /bare with a small JSON object, in its own process like the cloud. Prints
 * `{"http":"http://127.0.0.1:PORT"}` once it listens; SIGTERM closes it.
 */
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import type FastifyFactory from 'fastify';

// Resolved from the cloud workspace, so the baseline runs the same fastify as the cloud.
const fromCloud = createRequire(new URL('../cloud/package.json', import.meta.url));
const mod = (await import(pathToFileURL(fromCloud.resolve('fastify')).href)) as { default: typeof FastifyFactory };
const Fastify = mod.default;

const app = Fastify({ logger: false });
app.get('/bare', async () => ({ api_keys: [{ id: 'key_bare', name: 'bare', scopes: ['admin'] }] }));

await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address();
if (address === null || typeof address === 'string') throw new Error('no TCP address');
process.stdout.write(`${JSON.stringify({ http: `http://127.0.0.1:${address.port}` })}\n`);

const stop = () => {
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
