import type { Writable } from 'node:stream';
import { InvalidArgumentError, type Command } from 'commander';
import { FleetClient } from '../client.js';
import { resolveConnection } from './config.js';
import { Output } from './output.js';

/** What every command gets: the output (table or --json) and a client made on first use. */
export interface CliContext {
  env: NodeJS.ProcessEnv;
  stdout: Writable & { isTTY?: boolean };
  stderr: Writable & { isTTY?: boolean };
  version: string;
}

export interface GlobalOptions {
  url?: string;
  config?: string;
  json?: boolean;
}

export function globals(cmd: Command): GlobalOptions {
  return cmd.optsWithGlobals<GlobalOptions>();
}

export function output(ctx: CliContext, cmd: Command): Output {
  return new Output(globals(cmd).json === true, ctx.stdout, ctx.stderr);
}

export function clientFor(ctx: CliContext, cmd: Command): FleetClient {
  const g = globals(cmd);
  const { url, apiKey } = resolveConnection({ ...(g.url !== undefined ? { url: g.url } : {}), ...(g.config !== undefined ? { config: g.config } : {}) }, ctx.env);
  return new FleetClient({ baseUrl: url, apiKey, headers: { 'user-agent': `fleet-cli/${ctx.version}` } });
}

/** `--limit` and friends: a whole number in range. */
export function intIn(min: number, max: number) {
  return (value: string): number => {
    if (!/^\d{1,9}$/.test(value) || Number(value) < min || Number(value) > max) throw new InvalidArgumentError(`a whole number from ${min} to ${max}`);
    return Number(value);
  };
}

/** Repeatable `key=value`. */
export function pair(value: string, previous: [string, string][] = []): [string, string][] {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError('expected key=value');
  return [...previous, [value.slice(0, eq), value.slice(eq + 1)]];
}

/** Comma-separated list, repeatable. */
export function list(value: string, previous: string[] = []): string[] {
  return [...previous, ...value.split(',').map((s) => s.trim()).filter((s) => s !== '')];
}

export function oneOf<T extends string>(values: readonly T[]) {
  return (value: string): T => {
    if (!(values as readonly string[]).includes(value)) throw new InvalidArgumentError(`one of ${values.join(', ')}`);
    return value as T;
  };
}

/** A value written on the command line: JSON when it parses (numbers, booleans, objects), else the string. */
export function jsonOrString(value: string): unknown {
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}
