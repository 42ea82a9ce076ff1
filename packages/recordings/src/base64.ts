/**
 * Base64 to bytes in Node (Buffer, native) and in the browser (`atob`). `text` may be the base64
 * string or its bytes (ASCII): bytes skip a UTF-8 decode of what can be megabytes of pixels.
 */
interface NodeBuffer {
  from(data: ArrayBufferLike, byteOffset: number, length: number): { toString(enc: 'latin1'): string };
  from(data: string, enc: 'base64'): Uint8Array;
}
const NodeBuffer = (globalThis as { Buffer?: NodeBuffer }).Buffer;
const latin1 = new TextDecoder('latin1');

export function base64Bytes(text: string | Uint8Array): Uint8Array {
  if (NodeBuffer !== undefined) {
    const s = typeof text === 'string' ? text : NodeBuffer.from(text.buffer, text.byteOffset, text.byteLength).toString('latin1');
    const b = NodeBuffer.from(s, 'base64');
    return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  }
  const bin = atob(typeof text === 'string' ? text : latin1.decode(text));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
