/** Foxglove's Emscripten builds, used without their Node-only wrappers (see mcap-support.ts). */
interface EmscriptenHeap {
  HEAPU8: Uint8Array;
  _malloc(size: number): number;
  _free(ptr: number): void;
}

declare module '@foxglove/wasm-zstd/dist/wasm-zstd.js' {
  const factory: () => Promise<EmscriptenHeap & { _decompress(dest: number, destSize: number, src: number, srcSize: number): number }>;
  export default factory;
}

declare module '@foxglove/wasm-lz4/dist/wasm-lz4.js' {
  const factory: () => Promise<EmscriptenHeap & { _createDecompressionContext(): number; _decompressFrame(ctx: number, dest: number, destSize: number, src: number, srcSize: number): number }>;
  export default factory;
}
