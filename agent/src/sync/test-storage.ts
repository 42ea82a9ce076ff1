/**
 * Test support for the uploader (not part of the build): a storage endpoint that behaves like
 * S3 for presigned PUTs and multipart uploads (over http or https), a throwaway CA made with the
 * `openssl` CLI, a stand-in for the cloud's side of the sync topics, and episodes with real files.
 * Only `*.test.ts` files import this module.
 */
import { createHash, randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SyncRequestSchema, type GrantFile, type SyncMessage, type SyncRequest } from '@fleet/protocol';
import { newEpisodeId } from '../ids.js';
import type { EpisodeFacts } from '../rules/episode-facts.js';
import { buildManifest } from '../recording/finalize.js';
import type { AgentStore, EpisodeRow } from '../store/types.js';
import type { ManualScheduler } from '../time.js';
import type { SyncTransport } from './channel.js';
import type { RateLimiter } from './rate-limit.js';

export interface StoredObject {
  body: Buffer;
  etag: string;
}

/** How the storage answers; tests change it between attempts. */
export interface StorageBehaviour {
  /** `md5`: S3's quoted MD5; `none`: no ETag header; `opaque`: an ETag that is not an MD5; `wrong`: a wrong MD5. */
  etag: 'md5' | 'none' | 'opaque' | 'wrong';
  /** Answer this status instead (once per entry) to requests whose path and query contain the key. */
  fail: { match: string; status: number; times: number; message?: string }[];
  /** The complete request answers 200 with an S3 `<Error>` document. */
  completeError: string | null;
  /** Delay before answering a part, ms (to see parts overlap). */
  partDelayMs: number;
}

/** An S3-like storage on 127.0.0.1 that keeps what it receives in memory. */
export class TestStorage {
  readonly objects = new Map<string, StoredObject>();
  /** uploadId -> part number -> bytes. */
  readonly uploads = new Map<string, { key: string; parts: Map<number, Buffer> }>();
  readonly requests: { method: string; url: string; status: number }[] = [];
  behaviour: StorageBehaviour = { etag: 'md5', fail: [], completeError: null, partDelayMs: 0 };
  partsInFlight = 0;
  maxPartsInFlight = 0;
  /** Bodies a request started but never finished (aborted by the client). */
  aborted = 0;

  private constructor(
    private readonly server: Server,
    readonly base: string,
  ) {}

  static async start(tls?: { key: string; cert: string }): Promise<TestStorage> {
    const holder: { storage?: TestStorage } = {};
    const handler = (req: IncomingMessage, res: ServerResponse) => void holder.storage!.handle(req, res);
    const server = tls ? createHttpsServer(tls, handler) : createHttpServer(handler);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    const port = (server.address() as AddressInfo).port;
    const storage = new TestStorage(server, `${tls ? 'https' : 'http'}://127.0.0.1:${port}`);
    holder.storage = storage;
    return storage;
  }

  /** A new multipart upload for `key` (what a grant provider's CreateMultipartUpload gives). */
  createUpload(key: string): string {
    const id = `up-${randomBytes(6).toString('hex')}`;
    this.uploads.set(id, { key, parts: new Map() });
    return id;
  }

  putUrl(key: string): string {
    return `${this.base}/obj/${encodeURIComponent(key)}?X-Amz-Signature=test`;
  }

  /** The grant entry of one file: a PUT URL, or the multipart set for a new (or given) upload id. */
  grantFile(path: string, key: string, size: number, partSize?: number, uploadId?: string): GrantFile {
    if (partSize === undefined || size < partSize) return { path, put_url: this.putUrl(key) };
    const id = uploadId ?? this.createUpload(key);
    const n = Math.max(1, Math.ceil(size / partSize));
    return {
      path,
      upload_id: id,
      part_size: partSize,
      part_urls: Array.from({ length: n }, (_, i) => `${this.base}/obj/${encodeURIComponent(key)}?partNumber=${i + 1}&uploadId=${id}`),
      complete_url: `${this.base}/obj/${encodeURIComponent(key)}?uploadId=${id}`,
    };
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private etagFor(body: Buffer): string | undefined {
    const md5 = createHash('md5').update(body).digest('hex');
    switch (this.behaviour.etag) {
      case 'md5':
        return `"${md5}"`;
      case 'none':
        return undefined;
      case 'opaque':
        return `"${md5.slice(0, 16)}-kms"`;
      case 'wrong':
        return `"${createHash('md5').update('other').digest('hex')}"`;
    }
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.base);
    const answer = (status: number, body = '', headers: Record<string, string> = {}) => {
      this.requests.push({ method: req.method ?? '', url: url.pathname + url.search, status });
      res.writeHead(status, headers).end(body);
    };
    const chunks: Buffer[] = [];
    const isPart = url.searchParams.has('partNumber');
    if (isPart) {
      this.partsInFlight += 1;
      this.maxPartsInFlight = Math.max(this.maxPartsInFlight, this.partsInFlight);
    }
    try {
      try {
        for await (const c of req) chunks.push(c as Buffer);
      } catch {
        this.aborted += 1;
        return;
      }
      if (!req.complete) {
        this.aborted += 1;
        return;
      }
      if (isPart && this.behaviour.partDelayMs > 0) await new Promise((r) => setTimeout(r, this.behaviour.partDelayMs));
      const body = Buffer.concat(chunks);
      const fail = this.behaviour.fail.find((f) => f.times > 0 && (url.pathname + url.search).includes(f.match));
      if (fail) {
        fail.times -= 1;
        const message = fail.message === undefined ? '' : `<Message>${fail.message}</Message>`;
        answer(fail.status, `<?xml version="1.0"?><Error><Code>${fail.status === 403 ? 'AccessDenied' : 'InternalError'}</Code>${message}</Error>`);
        return;
      }
      const key = decodeURIComponent(url.pathname.replace(/^\/obj\//, ''));
      const uploadId = url.searchParams.get('uploadId');
      if (req.method === 'PUT' && uploadId === null) {
        const etag = this.etagFor(body);
        this.objects.set(key, { body, etag: etag ?? '' });
        answer(200, '', etag ? { etag } : {});
        return;
      }
      const upload = uploadId === null ? undefined : this.uploads.get(uploadId);
      if (!upload) {
        answer(404, '<?xml version="1.0"?><Error><Code>NoSuchUpload</Code></Error>');
        return;
      }
      if (req.method === 'PUT') {
        upload.parts.set(Number(url.searchParams.get('partNumber')), body);
        const etag = this.etagFor(body);
        answer(200, '', etag ? { etag } : {});
        return;
      }
      if (req.method === 'POST') {
        if (this.behaviour.completeError) {
          answer(200, `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${this.behaviour.completeError}</Code><Message>We encountered an internal error.</Message></Error>`);
          return;
        }
        const xml = body.toString('utf8');
        const listed = [...xml.matchAll(/<Part><PartNumber>(\d+)<\/PartNumber><ETag>([^<]*)<\/ETag><\/Part>/g)].map((m) => Number(m[1]));
        const numbers = [...upload.parts.keys()].sort((a, b) => a - b);
        if (listed.join(',') !== numbers.join(',')) {
          answer(400, `<Error><Code>InvalidPart</Code><Message>listed ${listed.join(',')} have ${numbers.join(',')}</Message></Error>`);
          return;
        }
        const whole = Buffer.concat(numbers.map((n) => upload.parts.get(n)!));
        this.objects.set(upload.key, { body: whole, etag: `"${createHash('md5').update(whole).digest('hex')}-${numbers.length}"` });
        this.uploads.delete(uploadId!);
        answer(200, `<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUploadResult><Key>${upload.key}</Key><ETag>&quot;x-${numbers.length}&quot;</ETag></CompleteMultipartUploadResult>`);
        return;
      }
      answer(405);
    } finally {
      if (isPart) this.partsInFlight -= 1;
    }
  }
}

/** A throwaway CA and a server certificate for 127.0.0.1 (openssl CLI). */
export function testCertificates(): { caFile: string; key: string; cert: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'sync-pki-'));
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=Sync Test CA', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
  writeFileSync(join(dir, 'srv.ext'), 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n');
  run(['req', ...ec, '-keyout', 'srv.key', '-out', 'srv.csr', '-subj', '/CN=127.0.0.1']);
  run(['x509', '-req', '-in', 'srv.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-set_serial', '1001', '-days', '1', '-out', 'srv.pem', '-extfile', 'srv.ext']);
  return {
    caFile: join(dir, 'ca.pem'),
    key: readFileSync(join(dir, 'srv.key'), 'utf8'),
    cert: readFileSync(join(dir, 'srv.pem'), 'utf8'),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/**
 * The cloud's side of the sync topics without a broker: records the robot's requests and answers
 * through `deliver` (the uploader's handleMessage) as `answer` decides (null: no answer).
 */
export class FakeSyncCloud implements SyncTransport {
  connected = true;
  readonly requests: SyncRequest[] = [];
  answer: (req: Extract<SyncRequest, { type: 'grant.request' }>) => SyncMessage | null = () => null;
  assignments: { episode_id: string; destination_id: string }[] = [];
  /** False: assignments.request goes unanswered (a cloud that does not read its link). */
  answerAssignments = true;
  deliver: (payload: Buffer) => void = () => undefined;

  async publishSyncRequest(payload: string): Promise<void> {
    if (!this.connected) throw new Error('not connected');
    const req = SyncRequestSchema.parse(JSON.parse(payload));
    this.requests.push(req);
    const msg: SyncMessage | null =
      req.type === 'assignments.request'
        ? this.answerAssignments
          ? { type: 'assignments', req_id: req.req_id, assignments: this.assignments, complete: true }
          : null
        : this.answer(req);
    if (msg) queueMicrotask(() => this.deliver(Buffer.from(JSON.stringify(msg))));
  }

  grantRequests(): Extract<SyncRequest, { type: 'grant.request' }>[] {
    return this.requests.filter((r): r is Extract<SyncRequest, { type: 'grant.request' }> => r.type === 'grant.request');
  }

  push(msg: SyncMessage): void {
    this.deliver(Buffer.from(JSON.stringify(msg)));
  }
}

/** Writes an episode with real files (`files`: path -> size in bytes) and stores it finalized. */
export async function storeEpisode(store: AgentStore, dataDir: string, files: Record<string, number>, at: number): Promise<EpisodeRow> {
  const id = newEpisodeId(at);
  const dir = join('episodes', id);
  const abs = join(dataDir, dir);
  await mkdir(abs, { recursive: true });
  for (const [path, size] of Object.entries(files)) {
    const file = join(abs, ...path.split('/'));
    await mkdir(join(file, '..'), { recursive: true });
    await writeFile(file, randomBytes(size));
  }
  const manifest = await buildManifest(abs, Object.keys(files));
  const facts = { id, outcome: Object.keys(files).length ? 'success' : 'discarded' } as unknown as EpisodeFacts;
  const row: EpisodeRow = {
    id,
    recordingSessionId: `rs_${id.slice(3)}`,
    episodeSeq: 1,
    outcome: facts.outcome,
    facts,
    manifest,
    finalizedAt: at,
    interrupted: false,
    dir,
  };
  await store.recording.complete(row, { msgId: `episode.report:${id}`, kind: 'episode.report', body: { id }, createdAt: at });
  return row;
}

/**
 * Runs uploads that share `limiter` on a manual clock until `done()`: the clock moves 10 ms at a
 * time, and only while a body waits for its turn and the bodies have counted every byte the
 * limiter let go (`counted()`). A body counts its piece a file read after its turn; moving the
 * clock in between would stamp those bytes later than their turn by however long the machine took
 * to read, so a sample (taken in `onStep`, after each step) would hold a turn more or less. Here
 * the bytes counted and the clock agree at every step, however busy the machine.
 */
export async function paceOnManualClock(args: {
  limiter: RateLimiter;
  scheduler: ManualScheduler;
  counted: () => number | Promise<number>;
  done: () => boolean | Promise<boolean>;
  onStep?: () => void | Promise<void>;
}): Promise<void> {
  const { limiter, scheduler } = args;
  while (!(await args.done())) {
    const due = limiter.waiting > 0 && limiter.granted === (await args.counted());
    if (due) {
      scheduler.advance(10);
      await args.onStep?.();
    }
    // Yield to the sockets and the file reads: at once after a step, a little longer when idle.
    await new Promise((resolve) => setTimeout(resolve, due ? 0 : 1));
  }
}
