/**
 * The config file's path and its problems, apart from the schema: the CLI's control commands
 * (status, episode, …) name them without loading the config's schemas and what they import.
 */

/** Where the package installs the config; used when `--config` is absent and the file exists. */
export const DEFAULT_CONFIG_PATH = '/etc/fleet-agent/agent.yaml';

export interface ConfigProblem {
  file: string;
  /** 1-based; absent when the problem is not tied to a place (an unreadable file). */
  line?: number;
  /** Dotted key path (`recorder.command`), empty for the whole file. */
  key: string;
  message: string;
}

export function formatProblem(p: ConfigProblem): string {
  return `${p.file}${p.line !== undefined ? `:${p.line}` : ''}: ${p.key ? `${p.key}: ` : ''}${p.message}`;
}

