import { ApiErrorBodySchema, EnrollBodySchema, EnrollResponseSchema, MAX_BROKER_URLS, type EnrollBody } from '@fleet/protocol';
import { fetch as undiciFetch } from 'undici';
import { readCredentials, writeCredentials, type Credentials } from './credentials.js';
import { EnrollError } from './errors.js';

export interface EnrollOptions {
  /** Base address of the API, e.g. `https://fleet.example.com` (with or without `/v1`). */
  api: string;
  /** Enrollment token (`ret_…`). */
  token: string;
  name?: string;
  platform?: string;
  runtimeVersion?: string;
  dataDir: string;
  /** The broker addresses to store instead of those the cloud answers with (one, or a cluster's nodes in the order to try them). */
  mqttUrls?: readonly string[];
  /** Replace existing credentials (the robot then becomes a new robot). */
  force?: boolean;
  /** Injected for tests; undici's fetch by default. */
  fetch?: (url: string, init: { method: string; headers: Record<string, string>; body: string }) => Promise<{ status: number; text(): Promise<string> }>;
}

/** The cloud's answer; `mqtt.urls` may be missing from a cloud older than broker clusters. */
const EnrollAnswerSchema = EnrollResponseSchema.extend({
  mqtt: EnrollResponseSchema.shape.mqtt.extend({ urls: EnrollResponseSchema.shape.mqtt.shape.urls.max(MAX_BROKER_URLS).optional() }),
});

function enrollUrl(api: string): string {
  const base = api.replace(/\/+$/, '').replace(/\/v1$/, '');
  return `${base}/v1/robots/enroll`;
}

/**
 * Enrolls this robot with the cloud (decisions.md, Robots) and stores the answer as its
 * credentials. Refuses to replace existing credentials unless `force` is set, since doing so
 * turns this robot into a new one.
 */
export async function enroll(opts: EnrollOptions): Promise<Credentials> {
  const existing = await readCredentials(opts.dataDir).catch(() => undefined);
  if (existing && !opts.force) {
    throw new EnrollError(`already enrolled as ${existing.robot_id} in ${opts.dataDir}; pass --force to enroll again as a new robot`, 'already_enrolled');
  }
  const body: EnrollBody = EnrollBodySchema.parse({
    token: opts.token,
    ...(opts.name !== undefined ? { name: opts.name } : {}),
    ...(opts.platform !== undefined ? { platform: opts.platform } : {}),
    ...(opts.runtimeVersion !== undefined ? { runtime_version: opts.runtimeVersion } : {}),
  });
  const url = enrollUrl(opts.api);
  const doFetch = opts.fetch ?? undiciFetch;
  let status: number;
  let text: string;
  try {
    const res = await doFetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json' }, body: JSON.stringify(body) });
    status = res.status;
    text = await res.text();
  } catch (err) {
    throw new EnrollError(`cannot reach ${url}: ${(err as Error).message}`, 'unreachable');
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new EnrollError(`enrollment answered ${status} with a body that is not JSON`, 'invalid_response', status);
  }
  if (status < 200 || status >= 300) {
    const apiError = ApiErrorBodySchema.safeParse(json);
    if (apiError.success) {
      throw new EnrollError(`enrollment refused (${status} ${apiError.data.error.code}): ${apiError.data.error.message}`, apiError.data.error.code, status);
    }
    throw new EnrollError(`enrollment failed with HTTP ${status}`, 'http_error', status);
  }
  const parsed = EnrollAnswerSchema.safeParse(json);
  if (!parsed.success) throw new EnrollError('enrollment answer does not match the expected shape', 'invalid_response', status);
  const r = parsed.data;
  const urls = opts.mqttUrls && opts.mqttUrls.length > 0 ? [...opts.mqttUrls] : (r.mqtt.urls ?? [r.mqtt.url]);
  const credentials: Credentials = {
    robot_id: r.robot_id,
    name: r.name,
    mqtt: { ...r.mqtt, url: urls[0]!, urls },
    api_url: opts.api,
    ...(opts.platform !== undefined ? { platform: opts.platform } : {}),
  };
  await writeCredentials(opts.dataDir, credentials);
  return credentials;
}
