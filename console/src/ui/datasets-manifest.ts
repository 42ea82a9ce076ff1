import type { FleetClient } from '@fleet/client';

/**
 * Downloading a snapshot's manifest to a file without assembling it in memory.
 *
 * The page asks the API for one manifest page at a time (`client.datasets.manifestPage`, 5,000
 * lines, the API's largest page) and writes each page's lines to the file as they arrive, so at
 * most one page is held by the page's script, never the whole manifest:
 *
 * - With the File System Access API (`showSaveFilePicker`, Chromium browsers), the lines go to a
 *   writable file stream in batches of about 256 KiB: memory stays bounded by one batch whatever
 *   the manifest's size.
 * - Without it (Firefox, Safari), each page becomes a `Blob` as soon as it is complete and the
 *   file is a `Blob` of those page blobs, saved through an `<a download href="blob:…">`. This is
 *   the honest fallback: its footprint is bounded by the manifest's size (browsers keep large
 *   blobs in their blob store, which may page them to disk, not in the script's heap), so very
 *   large manifests are better fetched with `fleet datasets manifest` or in a Chromium browser.
 *
 * No key ever goes in a URL: every request is the client's, with the key in its header.
 */

export const MANIFEST_PAGE_LINES = 5000;
const BATCH_CHARS = 256 * 1024;

export interface ManifestProgress {
  pages: number;
  lines: number;
  bytes: number;
}

export type SaveMode = 'file-system-access' | 'blob-link';

interface WritableLike {
  write(data: string): Promise<void>;
  close(): Promise<void>;
  abort?(reason?: unknown): Promise<void>;
}

type SavePicker = (options: { suggestedName: string; types?: { description: string; accept: Record<string, string[]> }[] }) => Promise<{ createWritable(): Promise<WritableLike> }>;

function picker(): SavePicker | undefined {
  const p = (window as unknown as { showSaveFilePicker?: unknown }).showSaveFilePicker;
  return typeof p === 'function' ? (p.bind(window) as SavePicker) : undefined;
}

export function manifestFileName(name: string, id: string): string {
  const safe = name.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 80);
  return `${safe ? `${safe}-` : ''}${id}-manifest.ndjson`;
}

/** Every manifest page in order, each handed over line by line (the header line first). */
async function eachLine(client: FleetClient, id: string, signal: AbortSignal, onLine: (line: string) => Promise<void> | void, onPage: (p: ManifestProgress) => void): Promise<ManifestProgress> {
  const progress: ManifestProgress = { pages: 0, lines: 0, bytes: 0 };
  let cursor: string | undefined;
  for (;;) {
    const page = await client.datasets.manifestPage(id, { limit: MANIFEST_PAGE_LINES, signal, ...(cursor !== undefined ? { cursor } : {}) });
    for await (const obj of page.lines) {
      const line = `${JSON.stringify(obj)}\n`;
      progress.lines++;
      progress.bytes += line.length;
      await onLine(line);
    }
    progress.pages++;
    onPage({ ...progress });
    if (!page.nextCursor) return progress;
    cursor = page.nextCursor;
  }
}

/**
 * Saves the manifest of snapshotted dataset `id`. Resolves with how it was saved, or null if the
 * user cancelled the file picker. Must be called straight from a click (the picker needs the
 * user's gesture).
 */
export async function downloadManifest(
  client: FleetClient,
  id: string,
  name: string,
  opts: { signal: AbortSignal; onProgress: (p: ManifestProgress) => void },
): Promise<{ mode: SaveMode; progress: ManifestProgress } | null> {
  const fileName = manifestFileName(name, id);
  const pick = picker();
  if (pick) {
    let handle;
    try {
      handle = await pick({ suggestedName: fileName, types: [{ description: 'NDJSON manifest', accept: { 'application/x-ndjson': ['.ndjson'] } }] });
    } catch (err) {
      if (err instanceof DOMException && err.name === 'AbortError') return null;
      throw err;
    }
    const out = await handle.createWritable();
    let batch = '';
    try {
      const progress = await eachLine(
        client,
        id,
        opts.signal,
        async (line) => {
          batch += line;
          if (batch.length >= BATCH_CHARS) {
            const b = batch;
            batch = '';
            await out.write(b);
          }
        },
        opts.onProgress,
      );
      if (batch) await out.write(batch);
      await out.close();
      return { mode: 'file-system-access', progress };
    } catch (err) {
      await out.abort?.(err).catch(() => undefined);
      throw err;
    }
  }

  const pages: Blob[] = [];
  let lines: string[] = [];
  const progress = await eachLine(
    client,
    id,
    opts.signal,
    (line) => void lines.push(line),
    (p) => {
      // The page is complete: into the blob store, out of the script's heap.
      pages.push(new Blob(lines, { type: 'application/x-ndjson' }));
      lines = [];
      opts.onProgress(p);
    },
  );
  const url = URL.createObjectURL(new Blob(pages, { type: 'application/x-ndjson' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = fileName;
  a.rel = 'noopener';
  document.body.append(a);
  a.click();
  a.remove();
  // The browser has started reading the blob; free it once the download surely had it.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
  return { mode: 'blob-link', progress };
}
