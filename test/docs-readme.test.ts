import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { REPO_ROOT } from './support/cloud.js';

/**
 * README.md against the workspaces: its first commands are the ones a new user types, and its
 * table of parts names every command the workspaces install (each package.json `bin`), so a CLI
 * is never there for only those who read package.json.
 */

const read = (path: string): string => readFileSync(join(REPO_ROOT, path), 'utf8');
const readme = read('README.md');

describe('README.md', () => {
  test('starts with npm ci && npm start, then npm test', () => {
    expect(/```sh\n([\s\S]*?)```/.exec(readme)?.[1]?.trim().split('\n')).toEqual(['npm ci && npm start', 'npm test']);
  });

  test('its table of parts names every command the workspaces install', () => {
    const table = readme.split(/^## What is here$/m)[1]?.split(/^## /m)[0] ?? '';
    const rows = table.split('\n').filter((l) => l.startsWith('|'));
    expect(rows.length).toBeGreaterThan(2);
    const workspaces = (JSON.parse(read('package.json')) as { workspaces: string[] }).workspaces;
    const bins = workspaces.flatMap((w) => Object.keys((JSON.parse(read(join(w, 'package.json'))) as { bin?: Record<string, string> }).bin ?? {}));
    expect(bins).toContain('fleet');
    for (const bin of bins) expect(rows.some((r) => r.includes(`\`npx ${bin} `)), `README's table runs npx ${bin}`).toBe(true);
  });
});
