import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig, type Plugin } from 'vite';

/**
 * The player reads MCAP chunks compressed with zstd, lz4 or bz2 through Foxglove's Emscripten
 * builds (@mcap/support loads all three). Each finds its `.wasm` with a `require("./x.wasm")` that
 * webpack turns into the file's URL and vite would turn into a wasm ES module (which they are
 * not). This emits each `.wasm` as a hashed asset and puts its URL there (`/console/assets/…`), so it
 * is served with the console's other files, cached the same way, and allowed by `connect-src
 * 'self'`; compiling it needs `'wasm-unsafe-eval'` in the cloud's CSP.
 */
const EMSCRIPTEN_WASM = [
  // Each locates its file with `require("./<name>.wasm")`, which webpack turns into the asset's URL.
  { module: /@foxglove[\\/]wasm-zstd[\\/]dist[\\/]wasm-zstd\.js$/, wasm: 'wasm-zstd.wasm', name: 'wasm-zstd', locate: /require\(["']\.\/wasm-zstd\.wasm["']\)/, as: (url: string) => url },
  { module: /@foxglove[\\/]wasm-lz4[\\/]dist[\\/]wasm-lz4\.js$/, wasm: 'wasm-lz4.wasm', name: 'wasm-lz4', locate: /require\(["']\.\/wasm-lz4\.wasm["']\)/, as: (url: string) => url },
  { module: /@foxglove[\\/]wasm-bz2[\\/]wasm[\\/]module\.js$/, wasm: 'module.wasm', name: 'wasm-bz2', locate: /require\(["']\.\/module\.wasm["']\)/, as: (url: string) => url },
];

function emscriptenWasm(): Plugin {
  let base = '/';
  let build = false;
  return {
    name: 'fleet-emscripten-wasm',
    configResolved(c) {
      base = c.base;
      build = c.command === 'build';
    },
    transform(code, id) {
      const file = id.split('?')[0]!;
      const hit = EMSCRIPTEN_WASM.find((w) => w.module.test(file));
      if (!hit) return undefined;
      const wasmPath = join(dirname(file), hit.wasm);
      let url: string;
      if (build) {
        const source = readFileSync(wasmPath);
        const fileName = `assets/${hit.name}-${createHash('sha256').update(source).digest('hex').slice(0, 10)}.wasm`;
        this.emitFile({ type: 'asset', fileName, source });
        url = `${base}${fileName}`;
      } else {
        url = `/@fs${wasmPath}`;
      }
      const out = code.replace(hit.locate, hit.as(JSON.stringify(url)));
      if (out === code) this.error(`${file}: found no reference to ${hit.wasm} to point at the asset (did the package change?)`);
      return { code: out, map: null };
    },
  };
}

// Served by the cloud at /console/ (same origin as /v1). Hashed asset names are cached immutably
// by the cloud; index.html is revalidated. No inline script or style: the CSP forbids them.
export default defineConfig({
  base: '/console/',
  resolve: {
    conditions: ['source'],
    // The real package loads bz2's decompressor, which needs eval: see src/player/mcap-support.ts.
    alias: [{ find: /^@mcap\/support$/, replacement: fileURLToPath(new URL('./src/player/mcap-support.ts', import.meta.url)) }],
  },
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  plugins: [emscriptenWasm()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // Inline assets would become data: URLs; keep every asset a file of its own.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    target: 'es2022',
    sourcemap: false,
  },
});
