/**
 * Where a recording's bytes come from: a local file (`@fleet/recordings/node`), an HTTP range
 * reader in the browser, or bytes in memory. The MCAP reader only ever asks for ranges, so a
 * recording is read by its index without holding the file.
 */
export interface ByteSource {
  /** The whole size in bytes. */
  readonly size: bigint | number;
  /** Exactly `length` bytes from `offset`; rejects when they are not there. */
  read(offset: bigint, length: bigint): Promise<Uint8Array>;
  /** Releases what the source holds open (a file handle); optional. */
  close?(): Promise<void>;
}

/** A source over bytes already in memory (tests, a fetched file in the browser). */
export function bytesSource(bytes: Uint8Array): ByteSource {
  return {
    size: bytes.byteLength,
    read: async (offset, length) => {
      const start = Number(offset);
      const end = start + Number(length);
      if (end > bytes.byteLength) throw new Error(`read past the end (${start}+${Number(length)} > ${bytes.byteLength})`);
      return bytes.subarray(start, end);
    },
  };
}
