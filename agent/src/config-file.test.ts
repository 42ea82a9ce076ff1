import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { effectiveConfig } from './cli-config.js';
import { ConfigFileError } from './errors.js';
import { loadConfigFile, parseConfigText, type ConfigProblem } from './config-file.js';
import { makeTempDir, removeTempDirs } from './test-support.js';

afterEach(removeTempDirs);

function problemsOf(fn: () => unknown): ConfigProblem[] {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigFileError) return [...err.problems];
    throw err;
  }
  throw new Error('no ConfigFileError');
}

async function problemsOfAsync(p: Promise<unknown>): Promise<ConfigProblem[]> {
  try {
    await p;
  } catch (err) {
    if (err instanceof ConfigFileError) return [...err.problems];
    throw err;
  }
  throw new Error('no ConfigFileError');
}

describe('the agent config file', () => {
  it('maps every snake_case key to its setting, paths relative to the file', () => {
    const f = parseConfigText(
      ['data_dir: robot', 'log_level: debug', 'upload_limit: 1048576', 'sync_retry_schedule_ms: [1000, 2000]', 'sync: false', 'recorder:', '  kind: synthetic', '  format: json', 'actions: simulated'].join('\n'),
      '/etc/fleet-agent/agent.yaml',
    );
    expect(f.input).toEqual({
      dataDir: '/etc/fleet-agent/robot',
      logLevel: 'debug',
      uploadLimit: 1048576,
      syncRetryScheduleMs: [1000, 2000],
      sync: false,
      recorder: { kind: 'synthetic', format: 'json' },
      actions: 'simulated',
    });
  });

  it('names the file, line and key of every problem, not only the first', () => {
    const text = ['data_dir: /var/lib/fleet-agent', 'log_levle: info', 'upload_limit: lots', 'recorder:', '  kind: command', '  comand: [ros2]'].join('\n');
    const problems = problemsOf(() => parseConfigText(text, 'agent.yaml'));
    const at = (key: string) => problems.find((p) => p.key === key);
    expect(at('log_levle')).toMatchObject({ file: 'agent.yaml', line: 2 });
    expect(at('log_levle')?.message).toContain('did you mean log_level');
    expect(at('upload_limit')).toMatchObject({ file: 'agent.yaml', line: 3 });
    expect(at('recorder.comand')).toMatchObject({ file: 'agent.yaml', line: 6 });
  });

  it('a YAML syntax error and a file that is not a mapping are refused with their line', () => {
    expect(problemsOf(() => parseConfigText('data_dir: /x\n  bad: [1, 2\n', 'a.yaml'))[0]?.line).toBeGreaterThan(0);
    const list = problemsOf(() => parseConfigText('- data_dir\n', 'a.yaml'))[0];
    expect(list?.line).toBe(1);
    expect(list?.message).toContain('mapping');
    expect(problemsOf(() => parseConfigText('data_dir: /x\ndata_dir: /y\n', 'a.yaml'))[0]).toMatchObject({ line: 2 });
  });

  it('an unreadable file is a problem of that file', async () => {
    const dir = await makeTempDir();
    const problems = await problemsOfAsync(loadConfigFile(join(dir, 'missing.yaml')));
    expect(problems[0]).toMatchObject({ file: join(dir, 'missing.yaml'), key: '' });
    expect(problems[0]?.message).toContain('ENOENT');
  });

  it('flags and variables override the file; the file overrides the defaults', async () => {
    const dir = await makeTempDir();
    const path = join(dir, 'agent.yaml');
    await writeFile(path, 'data_dir: /from/file\nlog_level: warn\nsync_concurrency: 4\n');
    const { config } = await effectiveConfig({ logLevel: 'error' }, { config: path }, {}, { checkPrograms: false });
    expect(config).toMatchObject({ dataDir: '/from/file', logLevel: 'error', syncConcurrency: 4, syncPartParallel: 3 });
  });

  it('a bad value from a flag is named as the flag, one from the file by its line', async () => {
    const dir = await makeTempDir();
    const path = join(dir, 'agent.yaml');
    await writeFile(path, 'data_dir: /x\nreconnect_min_ms: 5000\nreconnect_max_ms: 100\n');
    const fromFile = await problemsOfAsync(effectiveConfig({}, { config: path }, {}, { checkPrograms: false }));
    expect(fromFile[0]).toMatchObject({ file: path, line: 2, key: 'reconnect_min_ms' });
    const fromFlag = await problemsOfAsync(effectiveConfig({ syncConcurrency: 'many' }, { config: path }, {}, { checkPrograms: false }));
    expect(fromFlag.find((p) => p.key === 'sync_concurrency')?.file).toContain('--sync-concurrency');
  });

  it('without a data directory anywhere, says where to give one', async () => {
    const problems = await problemsOfAsync(effectiveConfig({}, { config: 'none' }, {}, { checkPrograms: false }));
    expect(problems[0]?.key).toBe('data_dir');
    expect(problems[0]?.message).toContain('--data-dir');
  });
});
