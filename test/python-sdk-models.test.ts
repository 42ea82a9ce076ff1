/**
 * The Python SDK's models never drift from the OpenAPI document: python/scripts/generate_models.py
 * (datamodel-code-generator with fixed options, in the venv of python/requirements-dev.txt)
 * regenerates them from cloud/openapi.json into a temp file, which must equal the checked-in
 * python/src/fleet/models.py. The sync client, generated from the async one, is checked the same way.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { cleanEnv, makeTempDir, REPO_ROOT } from './support/cloud.js';
import { runProcess } from './support/process.js';
import { ensurePythonEnv } from './support/python.js';

const REQUIREMENTS = join(REPO_ROOT, 'python', 'requirements-dev.txt');

describe('the Python SDK is generated from the document', () => {
  test('python/src/fleet/models.py is what cloud/openapi.json generates', async () => {
    const python = ensurePythonEnv((l) => console.warn(l), REQUIREMENTS);
    await using tmp = await makeTempDir('fleet-sdk-models-');
    const out = join(tmp.path, 'models.py');
    const r = await runProcess(python, [join(REPO_ROOT, 'python', 'scripts', 'generate_models.py'), '--out', out], {
      name: 'generate_models.py',
      cwd: REPO_ROOT,
      env: cleanEnv({ PYTHONDONTWRITEBYTECODE: '1' }),
      timeoutMs: 120_000,
    });
    expect(r.code, r.stderr).toBe(0);
    const fresh = readFileSync(out, 'utf8');
    const committed = readFileSync(join(REPO_ROOT, 'python', 'src', 'fleet', 'models.py'), 'utf8');
    expect(fresh.length).toBeGreaterThan(1000);
    if (fresh !== committed) {
      const a = committed.split('\n');
      const b = fresh.split('\n');
      const at = a.findIndex((line, i) => line !== b[i]);
      expect.fail(`python/src/fleet/models.py differs from what cloud/openapi.json generates (first at line ${at + 1}: ${JSON.stringify(a[at] ?? '')} vs ${JSON.stringify(b[at] ?? '')}): run npm run sdk:models`);
    }
  }, 180_000);

  test('python/src/fleet/_sync_client.py is what python/scripts/unasync.py writes from the async client', async () => {
    const python = ensurePythonEnv((l) => console.warn(l), REQUIREMENTS);
    const r = await runProcess(python, [join(REPO_ROOT, 'python', 'scripts', 'unasync.py'), '--check'], { name: 'unasync.py --check', cwd: REPO_ROOT, env: cleanEnv(), timeoutMs: 60_000 });
    expect(r.code, `${r.stderr}: run python python/scripts/unasync.py`).toBe(0);
  }, 90_000);
});
