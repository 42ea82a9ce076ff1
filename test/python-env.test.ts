/**
 * The tests' Python venv (test/support/python.ts): pyenv's 3.12, with exactly the versions
 * test/python/requirements.txt pins, reused on a second call.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, realpathSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ensurePythonEnv, PYTHON_REQUIREMENTS } from './support/python.js';

describe('the tests’ Python venv', () => {
  it('is Python 3.12 with the pinned packages, and a second call returns the same venv', () => {
    const python = ensurePythonEnv();
    expect(ensurePythonEnv()).toBe(python);
    const out = execFileSync(
      python,
      // Names compared in PEP 503's normal form: `pydantic_core`, `ruamel.yaml` and `huggingface_hub` are spelled so in their metadata.
      ['-c', 'import sys, json, re, importlib.metadata as m; print(json.dumps({"version": list(sys.version_info[:2]), "prefix": sys.prefix, "base": sys.base_prefix, "dists": {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in m.distributions()}}))'],
      { encoding: 'utf8' },
    );
    const info = JSON.parse(out) as { version: number[]; prefix: string; base: string; dists: Record<string, string> };
    expect(info.version).toEqual([3, 12]);
    // A venv, not the interpreter pyenv installed.
    expect(realpathSync(info.prefix)).not.toBe(realpathSync(info.base));
    const pins = readFileSync(PYTHON_REQUIREMENTS, 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'))
      .map((l) => l.split('=='));
    expect(pins.length).toBeGreaterThan(3);
    for (const [name, version] of pins) expect(info.dists[name!.replace(/\[.*\]$/, '').toLowerCase().replace(/[-_.]+/g, '-')], name).toBe(version);
  });
});
