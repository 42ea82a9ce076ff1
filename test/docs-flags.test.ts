import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { REPO_ROOT } from './support/cloud.js';

/**
 * The flag tables and benchmark lists of the docs against the code: each CLI's `--help` (the
 * built CLIs, as `npm test` builds first) and bench/run.ts. A flag added, renamed or dropped in
 * the code fails here until the docs say so.
 */

const read = (path: string): string => readFileSync(join(REPO_ROOT, path), 'utf8');

/** Every option of a commander `--help` with the environment variable it names, if any. */
function helpOptions(cli: string, args: readonly string[]): Map<string, string | null> {
  const r = spawnSync(process.execPath, [join(REPO_ROOT, cli), ...args, '--help'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cli} ${args.join(' ')} --help exited ${r.status}: ${r.stderr}`);
  const options = new Map<string, string | null>();
  // Each option starts on its own line, indented by two spaces; its description may wrap.
  for (const entry of r.stdout.split(/\n(?= {2}-)/).slice(1)) {
    const flag = /--[a-z0-9-]+/.exec(entry)?.[0];
    if (!flag || flag === '--help' || flag === '--version') continue;
    options.set(flag, /env:\s+(FLEET_[A-Z0-9_]+)/.exec(entry.replace(/\s+/g, ' '))?.[1] ?? null);
  }
  return options;
}

/** The lines of a Markdown section: from its heading to the next heading (of the same or a higher level, with `withSubsections`). */
function section(markdown: string, heading: string, withSubsections = false): string {
  const lines = markdown.split('\n');
  // A `# comment` inside a code block is not a heading.
  let inCode = false;
  const level = lines.map((l) => {
    if (l.startsWith('```')) inCode = !inCode;
    return !inCode && /^#+ /.test(l) ? /^#+/.exec(l)![0].length : 0;
  });
  const start = lines.findIndex((l, i) => level[i]! > 0 && l.replace(/^#+ /, '') === heading);
  if (start < 0) throw new Error(`no section "${heading}"`);
  const end = lines.findIndex((_, i) => i > start && level[i]! > 0 && (!withSubsections || level[i]! <= level[start]!));
  return lines.slice(start, end < 0 ? undefined : end).join('\n');
}

/** Table rows of a section whose first cell names flags: flag -> the variables of the second cell. */
function flagRows(text: string): Map<string, string[]> {
  const rows = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('| `--')) continue;
    const [, first = '', second = ''] = line.split('|');
    const flags = [...first.matchAll(/`(--[a-z0-9-]+)/g)].map((m) => m[1]!);
    const vars = [...second.matchAll(/`(FLEET_[A-Z0-9_]+)/g)].map((m) => m[1]!);
    flags.forEach((f, i) => rows.set(f, vars.length === flags.length ? [vars[i]!] : vars));
  }
  return rows;
}

const operations = read('docs/operations.md');

describe('docs/operations.md flag tables match the CLIs', () => {
  test.each([
    ['Running the cloud', 'cloud/dist/cli.js', ['serve']],
    ['Reference grant provider', 'simulator/dist/cli.js', ['grant-provider']],
    ['Simulated fleet', 'simulator/dist/cli.js', ['fleet']],
    ['Running on a broker cluster', 'cloud/dist/cli.js', ['broker-node']],
  ])('%s: every flag of %s %s, with its variable', (heading, cli, args) => {
    const help = helpOptions(cli, args);
    const table = flagRows(section(operations, heading));
    expect([...table.keys()].sort()).toEqual([...help.keys()].sort());
    for (const [flag, env] of help) if (env !== null) expect(table.get(flag), flag).toEqual([env]);
  });

  test('Uploads: every option exists on fleet-agent start, and fleet-sim fleet lacks only those the text names', () => {
    const text = section(operations, 'Uploads (cloud sync)');
    const table = [...flagRows(text).keys()];
    expect(table.length).toBeGreaterThan(5);
    const agent = helpOptions('agent/dist/cli.js', ['start']);
    expect(table.filter((f) => !agent.has(f))).toEqual([]);
    const fleet = helpOptions('simulator/dist/cli.js', ['fleet']);
    const missing = table.filter((f) => !fleet.has(f));
    const except = /takes the same\s+options except ([^.]*)\./.exec(text)?.[1] ?? '';
    expect(missing.sort()).toEqual([...except.matchAll(/`(--[a-z0-9-]+)`/g)].map((m) => m[1]!).sort());
  });
});

describe('docs/robots.md (Every setting) matches fleet-agent start', () => {
  const robots = read('docs/robots.md');
  const text = section(robots, 'Every setting');

  test('every flag of fleet-agent start has a row, with its variable', () => {
    const help = helpOptions('agent/dist/cli.js', ['start']);
    const table = flagRows(text);
    expect([...table.keys()].sort()).toEqual([...help.keys()].sort());
    for (const [flag, env] of help) if (env !== null) expect(table.get(flag), flag).toEqual([env]);
  });

  test('every agent.yaml key the table names is one the config file takes', () => {
    const keys = [...text.matchAll(/^\| `--[^|]*\|[^|]*\| `([a-z_]+)`/gm)].map((m) => m[1]!);
    expect(keys.length).toBeGreaterThan(15);
    const dir = mkdtempSync(join(tmpdir(), 'robots-md-'));
    try {
      // Each key alone in a file: `config check` refuses an unknown key with exit 2.
      const unknown = keys.filter((k) => {
        const file = join(dir, `${k}.yaml`);
        writeFileSync(file, `data_dir: ${dir}\n${k}: ${k === 'recorder' ? '{kind: synthetic}' : 'X'}\n`);
        const r = spawnSync(process.execPath, [join(REPO_ROOT, 'agent/dist/cli.js'), 'config', 'check', file], { encoding: 'utf8', env: { ...process.env, FLEET_AGENT_CONFIG: 'none' } });
        return /unknown key/.test(r.stderr);
      });
      expect(unknown).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('benchmark lists match bench/run.ts', () => {
  const names = [...read('bench/run.ts').matchAll(/^ {2}([a-z][a-z0-9-]*): async/gm)].map((m) => m[1]!);

  test('bench/run.ts has benchmarks', () => {
    expect(names.length).toBeGreaterThan(3);
  });

  test('docs/operations.md (Benchmarks) names each one', () => {
    const text = section(operations, 'Benchmarks');
    const listed = /runs one benchmark: ([^.]*)\./.exec(text.replace(/\s+/g, ' '))?.[1] ?? '';
    expect([...listed.matchAll(/`([a-z0-9-]+)`/g)].map((m) => m[1]!).sort()).toEqual([...names].sort());
  });

  test('README names each one', () => {
    const listed = /npm run bench -- ([a-z0-9|\\-]+)`/.exec(read('README.md'))?.[1] ?? '';
    expect(listed.split(/\\?\|/).sort()).toEqual([...names].sort());
  });
});

describe('docs/api.md covers the OpenAPI document', () => {
  test('every operation of cloud/openapi.json is named in the guide', () => {
    const openapi = JSON.parse(read('cloud/openapi.json')) as { paths: Record<string, Record<string, unknown>> };
    const guide = read('docs/api.md');
    const missing: string[] = [];
    let checked = 0;
    for (const [path, operations] of Object.entries(openapi.paths)) {
      for (const method of Object.keys(operations).filter((m) => ['get', 'post', 'put', 'patch', 'delete'].includes(m))) {
        checked++;
        const named = `${method.toUpperCase()} ${path}`;
        // Robot commands are one table of path suffixes under `POST /v1/robots/{id}/<command>`.
        const command = /^\/v1\/robots\/\{id\}\/(.+)$/.exec(path)?.[1];
        const covered = guide.includes(named) || (method === 'post' && command !== undefined && guide.includes(`\`${command}\``));
        if (!covered) missing.push(named);
      }
    }
    expect(checked).toBeGreaterThan(30);
    expect(missing).toEqual([]);
  });
});
