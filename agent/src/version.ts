import { readFileSync } from 'node:fs';

/**
 * The agent's one version: `fleet-agent --version`, the runtime version announced in the robot
 * status and the Debian package's version all come from agent/package.json. Read at run time,
 * relative to this module, so that it holds from src/ (tests), dist/ (a checkout) and
 * /usr/lib/fleet-agent/dist/ (the package, which ships that package.json beside dist/).
 */
function readAgentVersion(): string {
  const manifest = new URL('../package.json', import.meta.url);
  const parsed = JSON.parse(readFileSync(manifest, 'utf8')) as { name?: unknown; version?: unknown };
  if (parsed.name !== '@fleet/agent' || typeof parsed.version !== 'string' || parsed.version === '') {
    throw new Error(`${manifest.pathname} is not @fleet/agent's package.json with a version`);
  }
  return parsed.version;
}

export const AGENT_VERSION: string = readAgentVersion();

/** The runtime version this build announces; `--legacy-runtime` announces a pre-episodes.v1 one. */
export const AGENT_RUNTIME_VERSION = AGENT_VERSION;
/** What a legacy runtime (no native episode commands) announces by default. */
export const LEGACY_RUNTIME_VERSION = '0.0.9-legacy';
