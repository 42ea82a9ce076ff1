import { chmodSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { apiBaseUrl } from '../client.js';
import { API_KEY_FORMAT, apiKeyProblem } from '../errors.js';
import { UsageError } from './errors.js';

/** What `fleet login` writes: where the API is and the key to use. */
export interface FleetConfigFile {
  url?: string;
  api_key?: string;
}

/** `$XDG_CONFIG_HOME/fleet/config.json`, by default `~/.config/fleet/config.json`. */
export function defaultConfigPath(env: NodeJS.ProcessEnv): string {
  const base = env.XDG_CONFIG_HOME && env.XDG_CONFIG_HOME.startsWith('/') ? env.XDG_CONFIG_HOME : join(homedir(), '.config');
  return join(base, 'fleet', 'config.json');
}

/**
 * Reads the config file, or null when it does not exist. A file that the group or others may
 * read is refused: it holds an API key, and ssh refuses a readable private key for the same reason.
 */
export function readConfigFile(path: string): FleetConfigFile | null {
  let mode: number;
  try {
    mode = statSync(path).mode;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new UsageError(`cannot read config file ${path}: ${(err as Error).message}`);
  }
  if ((mode & 0o077) !== 0) {
    throw new UsageError(`config file ${path} is accessible by group or others (mode ${(mode & 0o777).toString(8).padStart(4, '0')}); run: chmod 600 ${path}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    throw new UsageError(`config file ${path} is not valid JSON`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new UsageError(`config file ${path} must hold a JSON object`);
  const { url, api_key } = parsed as Record<string, unknown>;
  if ((url !== undefined && typeof url !== 'string') || (api_key !== undefined && typeof api_key !== 'string')) {
    throw new UsageError(`config file ${path}: url and api_key must be strings`);
  }
  return { ...(url !== undefined ? { url } : {}), ...(api_key !== undefined ? { api_key } : {}) };
}

/** Writes the config with mode 0600 (its directory 0700), replacing the file in one rename. */
export function writeConfigFile(path: string, config: FleetConfigFile): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

export interface Connection {
  url: string;
  apiKey: string;
}

/**
 * The URL comes from `--url`, then `FLEET_URL`, then the config file; the key from
 * `FLEET_API_KEY`, then the config file. The file is read only when something is still missing
 * or `--config` names it.
 */
export function resolveConnection(flags: { url?: string; config?: string }, env: NodeJS.ProcessEnv): Connection {
  let url = flags.url ?? env.FLEET_URL;
  let apiKey = env.FLEET_API_KEY;
  let keySource = 'FLEET_API_KEY';
  const path = flags.config ?? defaultConfigPath(env);
  if (flags.config !== undefined || url === undefined || apiKey === undefined) {
    const file = readConfigFile(path);
    if (file === null && flags.config !== undefined) throw new UsageError(`config file ${path} does not exist`);
    url ??= file?.url;
    if (apiKey === undefined && file?.api_key !== undefined) {
      apiKey = file.api_key;
      keySource = `the api_key of ${path}`;
    }
  }
  if (!url) throw new UsageError('no API URL: pass --url, set FLEET_URL, or run fleet login --url URL --key KEY');
  if (!apiKey) throw new UsageError('no API key: set FLEET_API_KEY or run fleet login --url URL --key KEY');
  return { url: checkUrl(url), apiKey: checkApiKey(apiKey, keySource) };
}

/** The key without surrounding whitespace, or a usage error naming where it came from (never the key). */
export function checkApiKey(key: string, source: string): string {
  const problem = apiKeyProblem(key);
  if (problem !== null) throw new UsageError(`the API key in ${source} is malformed: ${problem}; an API key is ${API_KEY_FORMAT}`);
  return key.trim();
}

export function checkUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`not a URL: ${url.slice(0, 64)}`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new UsageError(`the URL must be http or https: ${url.slice(0, 64)}`);
  // The API's address as it is printed (`…/v1`) names the same API.
  return apiBaseUrl(url);
}
