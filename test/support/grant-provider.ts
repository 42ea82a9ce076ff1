import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GRANT_EVENT, READ_EVENT, signPayload, type GrantRequestEnvelope, type ReadRequestEnvelope } from '@fleet/protocol';
import { Agent, request } from 'undici';
import { cleanEnv, REPO_ROOT } from './cloud.js';
import { spawnProcess, type SpawnedProcess } from './process.js';
import type { S3ServerProcess } from './s3-server.js';

export const SIM_CLI = join(REPO_ROOT, 'simulator', 'dist', 'cli.js');

export interface StartGrantProviderOptions {
  s3: S3ServerProcess;
  /** FLEET_PROVIDER_SECRET and, when given, FLEET_PROVIDER_PREVIOUS_SECRET. */
  secret: string;
  previousSecret?: string;
  /** HTTPS with these PEM files and a client that trusts `ca`; plain HTTP when absent. */
  tls?: { certFile: string; keyFile: string; ca: string };
  /** More flags, e.g. `--multipart-threshold-bytes`. */
  args?: readonly string[];
  /** false: a provider without read support (`--no-read-links`: read requests answer 501). Default on. */
  reads?: boolean;
}

export interface GrantAskOptions {
  /** Signing secrets (newest first); the provider's own secret by default; [] sends no header. */
  secrets?: readonly string[];
  /** Unix seconds of the signature; now by default. */
  timestampS?: number;
  /** Raw body instead of the JSON of the envelope. */
  rawBody?: string | Buffer;
  headers?: Record<string, string>;
  /** `X-Service-Event`; `grant.request` by default (`askRead` sends `read.request`). */
  event?: string;
}

export interface GrantProviderProcess extends AsyncDisposable {
  readonly url: string;
  readonly process: SpawnedProcess;
  /** POSTs a signed grant request as the cloud does; resolves with the status and parsed JSON. */
  ask(envelope: GrantRequestEnvelope | null | Record<string, unknown>, opts?: GrantAskOptions): Promise<{ status: number; body: unknown }>;
  /** The same for a read request (`X-Service-Event: read.request`). */
  askRead(envelope: ReadRequestEnvelope | null | Record<string, unknown>, opts?: GrantAskOptions): Promise<{ status: number; body: unknown }>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Starts `fleet-sim grant-provider` against `s3` on a free port, configured through the environment. */
export async function startGrantProvider(opts: StartGrantProviderOptions): Promise<GrantProviderProcess> {
  const args = [
    SIM_CLI,
    'grant-provider',
    '--port',
    '0',
    ...(opts.tls ? ['--tls-cert', opts.tls.certFile, '--tls-key', opts.tls.keyFile] : ['--insecure-http']),
    ...(opts.reads === false ? ['--no-read-links'] : []),
    ...(opts.args ?? []),
  ];
  const env = cleanEnv({
    FLEET_PROVIDER_SECRET: opts.secret,
    FLEET_PROVIDER_PREVIOUS_SECRET: opts.previousSecret,
    FLEET_PROVIDER_S3_ENDPOINT: opts.s3.endpoint,
    FLEET_PROVIDER_S3_REGION: opts.s3.region,
    FLEET_PROVIDER_S3_BUCKET: opts.s3.bucket,
    FLEET_PROVIDER_S3_PATH_STYLE: '1',
    FLEET_PROVIDER_S3_ACCESS_KEY_ID: opts.s3.accessKeyId,
    FLEET_PROVIDER_S3_SECRET_ACCESS_KEY: opts.s3.secretAccessKey,
    FLEET_PROVIDER_STORE_TIMEOUT_MS: '3000',
  });
  const proc = spawnProcess(process.execPath, args, { name: 'fleet-sim grant-provider', cwd: REPO_ROOT, env });
  let url: string;
  try {
    const line = await proc.waitForStdout((l) => l.startsWith('{"url"'), { description: 'the {"url":…} line' });
    url = (JSON.parse(line) as { url: string }).url;
  } catch (err) {
    await proc.kill('SIGKILL');
    throw err;
  }
  const dispatcher = new Agent({ connect: opts.tls ? { ca: opts.tls.ca } : {} });
  const secret = opts.secret;
  const ask: GrantProviderProcess['ask'] = async (envelope, o = {}) => {
    const body = o.rawBody ?? JSON.stringify(envelope);
    const secrets = o.secrets ?? [secret];
    const t = o.timestampS ?? Math.floor(Date.now() / 1000);
    const destinationId = (envelope as { request?: { destination_id?: string } } | null)?.request?.destination_id;
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'x-service-event': o.event ?? GRANT_EVENT,
      'x-service-event-id': `evt_${randomUUID()}`,
      ...(destinationId ? { 'x-service-destination-id': destinationId } : {}),
      ...(secrets.length > 0 ? { 'x-service-signature': signPayload(body, secrets, t) } : {}),
      ...o.headers,
    };
    const res = await request(`${url}/grants`, { method: 'POST', body, headers, dispatcher });
    const text = await res.body.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: returned as text
    }
    return { status: res.statusCode, body: parsed };
  };
  return {
    url,
    process: proc,
    ask,
    askRead: (envelope, o = {}) => ask(envelope, { event: READ_EVENT, ...o }),
    async kill(signal = 'SIGTERM') {
      await proc.kill(signal);
    },
    async [Symbol.asyncDispose]() {
      await dispatcher.close();
      await proc.kill('SIGTERM');
    },
  };
}

/**
 * A certificate for a provider on 127.0.0.1/localhost, signed by `pki`, written to `dir` (the
 * key with mode 0600): the `tls` option of `startGrantProvider`.
 */
export function writeProviderTls(pki: { issue(dns: readonly string[], ips?: readonly string[]): { cert: string; key: string }; caPem: string }, dir: string): { certFile: string; keyFile: string; ca: string } {
  const pair = pki.issue(['localhost'], ['127.0.0.1']);
  const files = { certFile: join(dir, 'provider.crt'), keyFile: join(dir, 'provider.key'), ca: pki.caPem };
  writeFileSync(files.certFile, pair.cert);
  writeFileSync(files.keyFile, pair.key, { mode: 0o600 });
  return files;
}
