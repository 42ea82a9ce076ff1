import { join } from 'node:path';
import { isMultipartFile, type Clock, type GrantFile, type SyncMessage } from '@fleet/protocol';
import type { Logger } from 'pino';
import type { EpisodeRow, ReplicaRow, SyncStore, UploadFileRow } from '../store/types.js';
import { checkFileSize, checkReceipt, checkUploadUrl, multipartUpload, putFile, type UploadHttp } from './transfer.js';
import { UploadError } from '../errors.js';

export type GrantMessage = Extract<SyncMessage, { type: 'grant' }>;

/**
 * Checks a grant against the episode before a byte is sent: every manifest file granted exactly
 * once at its path and nothing else, entries that fit the protocol, and URLs the agent may use
 * (https, or http with the opt-in).
 */
export function validateGrant(grant: GrantMessage, episode: EpisodeRow, allowHttp: boolean): void {
  const byPath = new Map<string, GrantFile>();
  for (const f of grant.files) {
    if (byPath.has(f.path)) throw new UploadError('grant_invalid', `the grant names ${f.path} twice`);
    byPath.set(f.path, f);
  }
  const manifest = new Set(episode.manifest.files.map((f) => f.path));
  for (const path of byPath.keys()) if (!manifest.has(path)) throw new UploadError('grant_invalid', `the grant names ${path}, which is not in the manifest`);
  for (const m of episode.manifest.files) {
    const f = byPath.get(m.path);
    if (!f) throw new UploadError('grant_invalid', `the grant has no URL for ${m.path}`);
    if (isMultipartFile(f)) {
      if (grant.protocol !== 's3-multipart') throw new UploadError('grant_invalid', `an ${grant.protocol} grant has a multipart entry for ${m.path}`);
      for (const u of f.part_urls) checkUploadUrl(u, allowHttp);
      checkUploadUrl(f.complete_url, allowHttp);
    } else {
      checkUploadUrl(f.put_url, allowHttp);
    }
  }
}

/**
 * Uploads every file of the episode that is not complete at the destination yet, one file after
 * the other, each by what its grant entry carries (a PUT, or the multipart set). Progress is
 * stored as it happens: the upload id before the first part, each part as it is accepted, each
 * file with what was sent and its receipt when it is complete.
 */
export async function uploadFiles(args: {
  store: SyncStore;
  clock: Clock;
  http: UploadHttp;
  episodeDir: string;
  episode: EpisodeRow;
  row: ReplicaRow;
  grant: GrantMessage;
  partParallel: number;
  signal: AbortSignal;
  onFirstByte: () => void;
  /** Bytes handed to the connection, as they go (live progress). */
  onBytes?: (n: number) => void;
  /** A part or a file was accepted by the store and stored as done. */
  onProgress?: () => void;
  logger: Logger;
}): Promise<void> {
  const { store, clock, row, grant, episode } = args;
  const { episodeId, destinationId } = row;
  const progress = new Map((await store.files(episodeId, destinationId)).map((f) => [f.path, f]));
  const entries = new Map(grant.files.map((f) => [f.path, f]));
  for (const m of episode.manifest.files) {
    const done = progress.get(m.path);
    if (done?.complete && done.sha256Sent === m.sha256) continue;
    const entry = entries.get(m.path)!;
    const file = join(args.episodeDir, ...m.path.split('/'));
    await checkFileSize(file, m.path, m.size_bytes);
    if (isMultipartFile(entry)) {
      await store.beginMultipart(episodeId, destinationId, m.path, entry.upload_id, entry.part_size, clock.now());
      const current = (await store.files(episodeId, destinationId)).find((f) => f.path === m.path);
      const before = new Map((current?.parts ?? []).map((p) => [p.partNumber, p]));
      if (before.size > 0) args.logger.info({ episode_id: episodeId, path: m.path, upload_id: entry.upload_id, parts_done: before.size }, 'resuming a multipart upload');
      try {
        const result = await multipartUpload({
          http: args.http,
          job: {
            file,
            label: m.path,
            size: m.size_bytes,
            expectedSha256: m.sha256,
            uploadId: entry.upload_id,
            partSize: entry.part_size,
            partUrls: entry.part_urls,
            completeUrl: entry.complete_url,
            done: before,
          },
          parallel: args.partParallel,
          signal: args.signal,
          onFirstByte: args.onFirstByte,
          ...(args.onBytes ? { onBytes: args.onBytes } : {}),
          onPart: async (part) => {
            await store.partDone(episodeId, destinationId, m.path, entry.upload_id, part, clock.now());
            args.onProgress?.();
          },
        });
        await store.fileDone(episodeId, destinationId, m.path, { uploadId: entry.upload_id, bytesSent: result.bytes, sha256Sent: result.sha256, md5Sent: null, receipt: result.receipt }, clock.now());
        args.onProgress?.();
      } catch (err) {
        // The store no longer knows the upload: its parts are gone, so the next grant starts a new one.
        if (err instanceof UploadError && err.code === 'complete_failed' && /NoSuchUpload/.test(err.message)) await store.resetFile(episodeId, destinationId, m.path);
        throw err;
      }
    } else {
      // A file smaller than one part, or an http-put grant: one PUT (a multipart begun earlier is dropped).
      if (done?.uploadId) await store.resetFile(episodeId, destinationId, m.path);
      const result = await putFile({
        http: args.http,
        url: entry.put_url,
        file,
        label: m.path,
        size: m.size_bytes,
        expectedSha256: m.sha256,
        signal: args.signal,
        onFirstByte: args.onFirstByte,
        ...(args.onBytes ? { onBytes: args.onBytes } : {}),
      });
      const check = checkReceipt(result.receipt, result, `PUT ${m.path}`);
      // The store holds other bytes than were sent: send the file again next time.
      if (!check.ok && check.mismatch) throw new UploadError('receipt_mismatch', check.message);
      await store.fileDone(episodeId, destinationId, m.path, { uploadId: null, bytesSent: result.bytes, sha256Sent: result.sha256, md5Sent: result.md5, receipt: result.receipt }, clock.now());
      args.onProgress?.();
    }
  }
}

export type Verdict = { ok: true; note?: string } | { ok: false; code: string; message: string };

/**
 * Verification without read-back: every file's SHA-256 of the bytes sent equals the manifest
 * and every receipt matches what was sent (a single PUT's ETag is the quoted MD5 of the body, a
 * part's ETag the MD5 of the part, or an echoed x-amz-checksum-sha256). Receipts that prove
 * nothing (no ETag, or one of another form) leave a note: the replica stays `synced`.
 */
export function verifyReplica(episode: EpisodeRow, files: readonly UploadFileRow[]): Verdict {
  const byPath = new Map(files.map((f) => [f.path, f]));
  const notes: string[] = [];
  for (const m of episode.manifest.files) {
    const f = byPath.get(m.path);
    if (!f?.complete || f.receipt === null || f.sha256Sent === null) return { ok: false, code: 'incomplete', message: `${m.path} is not complete at the destination` };
    if (f.sha256Sent !== m.sha256) return { ok: false, code: 'file_changed', message: `the bytes sent for ${m.path} do not match its manifest` };
    if (f.uploadId === null) {
      const check = checkReceipt(f.receipt, { md5: f.md5Sent, sha256: f.sha256Sent }, m.path);
      if (!check.ok) {
        if (check.mismatch) return { ok: false, code: 'receipt_mismatch', message: check.message };
        notes.push(check.note);
      }
    } else {
      // The parts the store accepted are the whole file: numbered 1..n with no gap, their sizes
      // adding up to the manifest's (the file's hash covers the bytes read, not what was stored).
      const covered = f.parts.reduce((n, p) => n + p.size, 0);
      const gap = f.parts.findIndex((p, i) => p.partNumber !== i + 1);
      if (gap !== -1 || covered !== m.size_bytes) {
        const why = gap !== -1 ? `part ${gap + 1} is missing` : `they hold ${covered} of its ${m.size_bytes} bytes`;
        return { ok: false, code: 'incomplete', message: `the parts of ${m.path} at the destination are not the whole file: ${why}` };
      }
      // Every part is checked: a part whose ETag proves nothing does not excuse a later one that contradicts.
      let note: string | undefined;
      for (const p of f.parts) {
        const check = checkReceipt({ etag: p.etag, checksumSha256: null }, { md5: p.md5, sha256: '' }, `part ${p.partNumber} of ${m.path}`);
        if (!check.ok) {
          if (check.mismatch) return { ok: false, code: 'receipt_mismatch', message: check.message };
          note ??= check.note;
        }
      }
      if (note !== undefined) notes.push(note);
    }
  }
  if (notes.length === 0) return { ok: true };
  const note = notes.length === 1 ? notes[0]! : `${notes[0]!} (and ${notes.length - 1} more files)`;
  return { ok: true, note: `not verified: ${note}; no usable receipt to compare with` };
}
