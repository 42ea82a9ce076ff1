import { stat } from 'node:fs/promises';
import { join, resolve, sep } from 'node:path';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/**
 * The web console at /console/, on the API's origin so that it calls /v1 without CORS. Outside
 * /v1: no API key (the page asks for one and keeps it in the browser), no rate limit, hidden
 * from the OpenAPI document. The console is a single-page app, so a deep link without a file
 * extension (`/console/robots/rbt_…`) answers its index.html; a missing asset is a 404.
 */

/**
 * The console's Content-Security-Policy. Its code and styles are files from this origin only (no
 * inline script or style, no asset from elsewhere); WebAssembly (the recordings' decompressors)
 * may compile, and workers come from this origin. It talks to this origin's /v1, and reads
 * recordings (fetch, and camera frames as images or blobs) from the installation's read origins
 * and nowhere else: a read link elsewhere is refused by the cloud before a page sees it.
 */
export function consoleContentSecurityPolicy(readOrigins: readonly string[]): string {
  const extra = readOrigins.map((o) => ` ${o}`).join('');
  return [
    "default-src 'self'",
    "script-src 'self' 'wasm-unsafe-eval'",
    "style-src 'self'",
    `img-src 'self' data: blob:${extra}`,
    `connect-src 'self'${extra}`,
    "worker-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** Headers on every console response (not on /v1, whose answers are JSON a page never renders). */
export function consoleSecurityHeaders(readOrigins: readonly string[]): Readonly<Record<string, string>> {
  return Object.freeze({
    'content-security-policy': consoleContentSecurityPolicy(readOrigins),
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'cross-origin-opener-policy': 'same-origin',
    'permissions-policy': 'camera=(), microphone=(), geolocation=()',
  });
}

/** The headers of an installation without read origins. */
export const CONSOLE_SECURITY_HEADERS: Readonly<Record<string, string>> = consoleSecurityHeaders([]);

/** Vite's hashed file names never change content, so a browser keeps them for a year. */
export const IMMUTABLE = 'public, max-age=31536000, immutable';
/** index.html names the current hashes: revalidated on every load (ETag, 304). */
export const REVALIDATE = 'no-cache';

const NOT_BUILT_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Console not built</title></head>
<body><h1>The console is not built</h1>
<p>This cloud serves the web console from a directory that has no <code>index.html</code>.
Run <code>npm run build</code> (or <code>npm run build -w console</code>), or point
<code>--console-dir</code> at a built console, then reload.</p>
<p>The API at <code>/v1</code> works without it.</p></body></html>
`;

const NOT_FOUND_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Not found</title></head>
<body><h1>Not found</h1><p><a href="/console/">Open the console</a></p></body></html>
`;

export interface ConsoleOptions {
  /** The built console (absolute, or relative to the working directory). */
  dir: string;
  /** The installation's read origins (`--read-origin`), allowed by the CSP for fetch and images. */
  readOrigins?: readonly string[];
}

export async function registerConsole(app: FastifyInstance, opts: ConsoleOptions): Promise<void> {
  const root = resolve(opts.dir);
  const assets = join(root, 'assets') + sep;
  const headers = consoleSecurityHeaders(opts.readOrigins ?? []);

  app.get('/', { schema: { hide: true } }, async (_request, reply) => {
    void reply.headers(headers);
    return reply.redirect('/console/', 302);
  });

  await app.register(
    async (scope) => {
      scope.addHook('onRequest', async (_request, reply) => {
        void reply.headers(headers);
      });

      // `/console` without the slash: the page's relative URLs need the directory form.
      scope.get('/', { schema: { hide: true }, prefixTrailingSlash: 'no-slash' }, async (request, reply) => {
        const q = request.url.indexOf('?');
        return reply.redirect(`/console/${q >= 0 ? request.url.slice(q) : ''}`, 302);
      });

      // Serves the files that exist (`/console/*`, GET and HEAD); @fastify/static refuses `..`
      // and non-canonical paths, and hands a missing file to the not-found handler below.
      await scope.register(fastifyStatic, {
        root,
        prefix: '/',
        wildcard: true,
        index: ['index.html'],
        dotfiles: 'ignore',
        cacheControl: false,
        schemaHide: true,
        // A missing directory is the "not built" page, not a warning at every start.
        suppressWarning: true,
        setHeaders: (reply, path) => {
          void reply.header('cache-control', path.startsWith(assets) ? IMMUTABLE : REVALIDATE);
        },
      });

      scope.setNotFoundHandler(async (request, reply) => spaFallback(root, request, reply));
    },
    { prefix: '/console' },
  );
}

/** A path under /console/ that names no file: the app's index.html, unless it asked for a file. */
async function spaFallback(root: string, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  if (request.method !== 'GET' && request.method !== 'HEAD') {
    return reply.code(405).header('allow', 'GET, HEAD').header('cache-control', REVALIDATE).type('text/plain; charset=utf-8').send('method not allowed\n');
  }
  const path = request.url.split('?')[0]!;
  // A dot in the last segment asks for a file (`app-x.js`, `.env`); the app's routes have none.
  if (path.slice(path.lastIndexOf('/') + 1).includes('.')) {
    return reply.code(404).header('cache-control', REVALIDATE).type('text/html; charset=utf-8').send(NOT_FOUND_PAGE);
  }
  if (!(await isFile(join(root, 'index.html')))) {
    return reply.code(503).header('cache-control', 'no-store').type('text/html; charset=utf-8').send(NOT_BUILT_PAGE);
  }
  return reply.code(200).sendFile('index.html', root);
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}
