import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { REPO_ROOT } from './support/cloud.js';
import { runProcess } from './support/process.js';

/**
 * The commands run by their names from a fresh `npm ci`: each bin in node_modules/.bin is this
 * checkout's CLI (never a registry package), prints its version, answers a usage error with one
 * line and exit code 2, and its --help examples name commands and options that exist.
 */

const CLIS = [
  { name: 'fleet-cloud', pkg: 'cloud' },
  { name: 'fleet-agent', pkg: 'agent' },
  { name: 'fleet-sim', pkg: 'simulator' },
  { name: 'fleet', pkg: 'packages/client' },
] as const;

const bin = (name: string) => join(REPO_ROOT, 'node_modules', '.bin', name);
const run = (name: string, args: string[]) => runProcess(bin(name), args, { name, cwd: REPO_ROOT, timeoutMs: 30_000 });

/** The command names listed under "Commands:" in a help text. */
function commandsOf(help: string): Set<string> {
  const section = help.split(/^Commands:$/m)[1]?.split(/^\S/m)[0] ?? '';
  return new Set([...section.matchAll(/^ {2}([a-z][\w-]*)/gm)].map((m) => m[1]!));
}

describe.each(CLIS)('$name', ({ name, pkg }) => {
  test('is linked to this checkout and prints its version', async () => {
    expect(existsSync(bin(name))).toBe(true);
    expect(realpathSync(bin(name))).toBe(realpathSync(join(REPO_ROOT, pkg, 'bin', `${name}.js`)));
    const { version } = JSON.parse(readFileSync(join(REPO_ROOT, pkg, 'package.json'), 'utf8')) as { version: string };
    const r = await run(name, ['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(version);
  });

  test('a usage error is one line on stderr and exit code 2, never a stack trace', async () => {
    for (const args of [['--no-such-option'], ['no-such-command'], [...(name === 'fleet-agent' ? ['enroll'] : name === 'fleet-sim' ? ['fleet'] : name === 'fleet' ? ['robots', 'get'] : ['serve', '--no-such-option'])]]) {
      const r = await run(name, args);
      expect(r.code, `${name} ${args.join(' ')}`).toBe(2);
      const lines = r.stderr.trim().split('\n');
      expect(lines, r.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(new RegExp(`^${name}: .+ \\(see ${name}( [a-z-]+)* --help\\)$`));
      expect(r.stdout).toBe('');
    }
  });

  test('every --help example names a command and options that exist', async () => {
    const helps = new Map<string, Promise<{ code: number | null; stdout: string }>>();
    const helpOf = (path: string[]) => {
      const key = path.join(' ');
      if (!helps.has(key)) helps.set(key, run(name, [...path, '--help']));
      return helps.get(key)!;
    };
    const help = await helpOf([]);
    expect(help.code).toBe(0);
    const examples = [...help.stdout.matchAll(new RegExp(`^ {2}\\$ (?:\\w+=\\S+ )*${name} (.*?)(?:\\s+#.*)?$`, 'gm'))].map((m) => m[1]!.trim().split(/\s+/));
    expect(examples.length).toBeGreaterThan(0);
    for (const tokens of examples) {
      const path: string[] = [];
      let commands = commandsOf(help.stdout);
      while (tokens.length > 0 && commands.has(tokens[0]!)) {
        path.push(tokens.shift()!);
        commands = commandsOf((await helpOf(path)).stdout);
      }
      const sub = await helpOf(path);
      expect(sub.code).toBe(0);
      // An option of the command itself, or a global one (listed in the top-level help).
      for (const flag of tokens.filter((t) => t.startsWith('--'))) expect(`${sub.stdout}\n${help.stdout}`, `${name} ${path.join(' ')}: ${flag}`).toContain(`${flag.split('=')[0]}`);
      // The example is not just options of the top level: it reached a command that does something.
      expect(path.length, `${name} ${tokens.join(' ')}`).toBeGreaterThan(0);
    }
  });
});
