import lz4Factory from '@foxglove/wasm-lz4/dist/wasm-lz4.js';
import zstdFactory from '@foxglove/wasm-zstd/dist/wasm-zstd.js';

/**
 * `@mcap/support` as the console's build sees it (vite.config.ts aliases the package here), for
 * its decompressors only. The real one loads three Emscripten decompressors at once, and bz2's
 * (built with embind) creates functions from strings while it starts: the console's
 * Content-Security-Policy forbids that (`script-src 'self' 'wasm-unsafe-eval'`, no
 * `'unsafe-eval'`), and one refusal would stop the whole player. So the console reads lz4 and
 * zstd chunks (rosbag2's and Foxglove's defaults: plain WebAssembly) and uncompressed ones; a bz2
 * chunk fails alone, saying why. The Emscripten modules are called as Foxglove's wrappers call
 * them, minus the wrappers' Node `Buffer`, which a browser lacks. Protobuf channels do not come
 * through here: @fleet/recordings decodes them with @bufbuild/protobuf, which reflects over the
 * descriptor instead of compiling code as the real package's protobufjs does.
 */

type Handler = (buffer: Uint8Array, decompressedSize: bigint) => Uint8Array;

/** CommonJS modules come through the bundler as `module.exports` or as `{default: module.exports}`. */
function unwrap<T>(m: T): T {
  const d = (m as { default?: T }).default;
  return d !== undefined && d !== null ? d : m;
}

/** Copies `src` into the module's heap, runs `run(dest, src)` and copies the result out. */
function throughHeap(mod: EmscriptenHeap, src: Uint8Array, destSize: number, run: (dest: number, srcPtr: number) => number, what: string): Uint8Array {
  const srcPtr = mod._malloc(src.byteLength);
  const dest = mod._malloc(destSize);
  try {
    mod.HEAPU8.set(src, srcPtr);
    const n = run(dest, srcPtr);
    if (n < 0) throw new Error(`${what}: the chunk does not decompress`);
    // HEAPU8 is read again: the heap may have grown (a new buffer) during the call.
    return mod.HEAPU8.slice(dest, dest + n);
  } finally {
    mod._free(srcPtr);
    mod._free(dest);
  }
}

let handlers: Promise<Record<string, Handler>> | undefined;

export function loadDecompressHandlers(): Promise<Record<string, Handler>> {
  return (handlers ??= (async () => {
    const [lz4, zstd] = await Promise.all([unwrap(lz4Factory)(), unwrap(zstdFactory)()]);
    const lz4Context = lz4._createDecompressionContext();
    return {
      lz4: (buffer, size) => throughHeap(lz4, buffer, Number(size), (dest, src) => lz4._decompressFrame(lz4Context, dest, Number(size), src, buffer.byteLength), 'lz4'),
      zstd: (buffer, size) => throughHeap(zstd, buffer, Number(size), (dest, src) => zstd._decompress(dest, Number(size), src, buffer.byteLength), 'zstd'),
      bz2: () => {
        throw new Error("bz2 chunks are not decompressed in the console (its decompressor needs eval, which the console's Content-Security-Policy forbids); lz4 and zstd are");
      },
    };
  })());
}
