import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

// The lint's import rules (.dependency-cruiser.cjs) on small trees laid out like the repository:
// the rules must refuse what they say they refuse, not merely pass on today's code.

const ROOT = resolve(import.meta.dirname, '..');
const DEPCRUISE = join(ROOT, 'node_modules', '.bin', 'depcruise');
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function cruise(files: Record<string, string>): { code: number | null; out: string } {
  const dir = mkdtempSync(join(tmpdir(), 'fleet-floors-'));
  dirs.push(dir);
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  const roots = [...new Set(Object.keys(files).map((f) => f.split('/').slice(0, 2).join('/')))];
  const r = spawnSync(DEPCRUISE, ['--config', join(ROOT, '.dependency-cruiser.cjs'), '--output-type', 'err', ...roots], { cwd: dir, encoding: 'utf8' });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe('the import floors', () => {
  it('passes a store that imports a rule, and a rule that takes a row type from the store', () => {
    const r = cruise({
      'cloud/src/rules/decide.ts': "import type { Row } from '../store/shared/rows.js';\nexport const decide = (r: Row) => r.id;\n",
      'cloud/src/store/shared/rows.ts': 'export interface Row { id: string }\n',
      'cloud/src/store/sqlite/thing.ts': "import { decide } from '../../rules/decide.js';\nexport const f = decide;\n",
    });
    expect(r.out).toContain('no dependency violations');
    expect(r.code).toBe(0);
  });

  it('refuses a store that imports a service above it, even for a type', () => {
    const r = cruise({
      'cloud/src/sync/router.ts': 'export class SyncRouter {}\n',
      'cloud/src/store/sqlite/sync.ts': "import type { SyncRouter } from '../../sync/router.js';\nexport type R = SyncRouter;\n",
    });
    expect(r.out).toContain('cloud-store-imports-nothing-above: cloud/src/store/sqlite/sync.ts → cloud/src/sync/router.ts');
    expect(r.code).not.toBe(0);
  });

  it('refuses a rule that imports a value from the store, or a service', () => {
    const r = cruise({
      'cloud/src/store/shared/rows.ts': 'export const ROW = 1;\n',
      'cloud/src/errors.ts': 'export class ApiError {}\n',
      'cloud/src/rules/decide.ts': "import { ROW } from '../store/shared/rows.js';\nimport { ApiError } from '../errors.js';\nexport const x = [ROW, ApiError];\n",
    });
    expect(r.out).toContain('cloud-rules-are-pure: cloud/src/rules/decide.ts → cloud/src/store/shared/rows.ts');
    expect(r.out).toContain('cloud-rules-are-pure: cloud/src/rules/decide.ts → cloud/src/errors.ts');
    expect(r.code).not.toBe(0);
  });

  it('refuses a service that builds the app, and a pipeline that imports a route', () => {
    const r = cruise({
      'cloud/src/app.ts': 'export const buildApp = 1;\n',
      'cloud/src/routes/v1/robots.ts': 'export const robots = 1;\n',
      'cloud/src/webhooks/delivery.ts': "import { buildApp } from '../app.js';\nexport const d = buildApp;\n",
      'cloud/src/http/pipeline.ts': "import { robots } from '../routes/v1/robots.js';\nexport const p = robots;\n",
    });
    expect(r.out).toContain('cloud-services-below-http: cloud/src/webhooks/delivery.ts → cloud/src/app.ts');
    expect(r.out).toContain('cloud-root-on-top: cloud/src/webhooks/delivery.ts → cloud/src/app.ts');
    expect(r.out).toContain('cloud-http-below-routes: cloud/src/http/pipeline.ts → cloud/src/routes/v1/robots.ts');
    expect(r.code).not.toBe(0);
  });

  it('refuses an agent store typed by a part above it, and a part that imports the daemon', () => {
    const r = cruise({
      'agent/src/recording/facts.ts': 'export interface Facts { task: string }\n',
      'agent/src/daemon.ts': 'export class Agent {}\n',
      'agent/src/store/sqlite-episodes.ts': "import type { Facts } from '../recording/facts.js';\nexport type Row = Facts;\n",
      'agent/src/sync/uploader.ts': "import { Agent } from '../daemon.js';\nexport const u = Agent;\n",
    });
    expect(r.out).toContain('agent-store-imports-nothing-above: agent/src/store/sqlite-episodes.ts → agent/src/recording/facts.ts');
    expect(r.out).toContain('agent-root-on-top: agent/src/sync/uploader.ts → agent/src/daemon.ts');
    expect(r.code).not.toBe(0);
  });

  it('refuses a cycle in any workspace, a type-only one too', () => {
    const r = cruise({
      'simulator/src/a.ts': "import type { B } from './b.js';\nexport interface A { b: B }\n",
      'simulator/src/b.ts': "import type { A } from './a.js';\nexport interface B { a: A }\n",
    });
    expect(r.out).toMatch(/no-circular: simulator\/src\/(a|b)\.ts/);
    expect(r.code).not.toBe(0);
  });

  it('refuses a console component that imports a page, and a player that imports the kit', () => {
    const r = cruise({
      'console/src/views/fleet.tsx': 'export const Fleet = 1;\n',
      'console/src/ui/components.tsx': "import { Fleet } from '../views/fleet.js';\nexport const C = Fleet;\n",
      'console/src/player/engine.ts': "import { C } from '../ui/components.js';\nexport const E = C;\n",
    });
    expect(r.out).toContain('console-ui-knows-no-page: console/src/ui/components.tsx → console/src/views/fleet.tsx');
    expect(r.out).toContain('console-player-stands-alone: console/src/player/engine.ts → console/src/ui/components.tsx');
    expect(r.code).not.toBe(0);
  });
});
