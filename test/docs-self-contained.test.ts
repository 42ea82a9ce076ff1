import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, test } from 'vitest';
import { signPayload } from '@fleet/protocol';
import { REPO_ROOT } from './support/cloud.js';

/**
 * The repository is read on its own: nothing in a tracked file points at documents that live
 * outside it (the contract and conventions the project was built from), and every relative link
 * in a Markdown file resolves to a file or directory of the repository.
 */

function trackedFiles(): string[] {
  const r = spawnSync('git', ['ls-files', '-z'], { cwd: REPO_ROOT, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`git ls-files failed: ${r.stderr}`);
  return r.stdout.split('\0').filter((p) => p !== '' && existsSync(join(REPO_ROOT, p)));
}

/** Names of documents outside the repository; this test file itself names them, and is skipped. */
const OUTSIDE = [/\/work\/shared\b/, /\bARCHITECTURE\.md\b/, /\bCONVENTIONS\.md\b/, /\bapi-v1\.md\b/];
const SELF = 'test/docs-self-contained.test.ts';

/**
 * A relative path to a `shared` folder that lands outside the repository (`../shared/spec`
 * from the root). The cloud's own `store/shared/` folder, reached as `../shared/` from beside
 * it, is inside and allowed.
 */
export function outsideSharedPath(file: string, line: string): boolean {
  for (const m of line.matchAll(/(?:\.\.\/)+shared\b/g)) {
    const target = normalize(join(dirname(file), m[0]));
    if (target.startsWith('..')) return true;
  }
  return false;
}
/** Wording in the docs that implies a document the reader does not have. */
const OUTSIDE_WORDING = [/\bthe spec\b/i, /\bspec's\b/i, /\(spec[,:)]/i, /\bspec decisions\b/i];

const isText = (path: string): boolean => !/\.(png|jpe?g|gif|ico|mcap|sqlite|gz|zip|woff2?)$/i.test(path);

/** Markdown links and images: `[text](target)`, without the `#fragment`; external URLs left out. */
export function relativeLinks(markdown: string): string[] {
  const withoutCode = markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
  const targets: string[] = [];
  for (const m of withoutCode.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    const target = m[1]!;
    if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('#')) continue;
    targets.push(decodeURIComponent(target.split('#')[0]!));
  }
  return targets;
}

describe('the repository is self-contained', () => {
  const files = trackedFiles().filter(isText);

  test('no tracked file names a document outside the repository', () => {
    const hits: string[] = [];
    for (const file of files) {
      if (file === SELF) continue;
      const lines = readFileSync(join(REPO_ROOT, file), 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (OUTSIDE.some((re) => re.test(line)) || outsideSharedPath(file, line)) hits.push(`${file}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(hits).toEqual([]);
  });

  test('the docs do not send the reader to an outside specification', () => {
    const hits: string[] = [];
    for (const file of files.filter((f) => f.endsWith('.md'))) {
      const lines = readFileSync(join(REPO_ROOT, file), 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (OUTSIDE_WORDING.some((re) => re.test(line))) hits.push(`${file}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(hits).toEqual([]);
  });

  test('every relative link in a Markdown file resolves inside the repository', () => {
    const broken: string[] = [];
    for (const file of files.filter((f) => f.endsWith('.md'))) {
      for (const target of relativeLinks(readFileSync(join(REPO_ROOT, file), 'utf8'))) {
        const resolved = target.startsWith('/') ? normalize(join(REPO_ROOT, target)) : normalize(join(REPO_ROOT, dirname(file), target));
        const inside = !relative(REPO_ROOT, resolved).startsWith('..');
        if (target === '' || !inside || !existsSync(resolved)) broken.push(`${file}: ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });

  test('finds links, skipping code, URLs and fragments', () => {
    const md = 'See [the API](api.md#errors), ![img](img/a.png), [site](https://x.io), [top](#top).\n```sh\n[x](nope.md)\n```\n`[y](nope2.md)`';
    expect(relativeLinks(md)).toEqual(['api.md', 'img/a.png']);
  });

  test('a path to the shared folder outside the repository is found; the store\'s own shared/ is not', () => {
    expect(outsideSharedPath('README.md', 'see ../shared/spec/api-v1.md')).toBe(true);
    expect(outsideSharedPath('docs/api.md', '(../../shared/decisions.md)')).toBe(true);
    expect(outsideSharedPath('cloud/src/store/postgres/accounts.ts', "import { apiKeyFromDb } from '../shared/rows.js';")).toBe(false);
    expect(outsideSharedPath('cloud/src/store/sqlite/store.ts', "import type { Store } from '../shared/types.js';")).toBe(false);
  });

  test("api.md's worked signature example is what the service signs", () => {
    const api = readFileSync(join(REPO_ROOT, 'docs', 'api.md'), 'utf8');
    expect(api).toContain('the secret `whsec_example`, the\nbody `{"hello":"world"}` and `t=1700000000`');
    expect(api).toContain(signPayload('{"hello":"world"}', ['whsec_example'], 1_700_000_000));
  });
});
