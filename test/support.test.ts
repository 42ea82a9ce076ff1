import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { makeTempDir, startCloud } from './support/cloud.js';
import { runProcess, spawnProcess } from './support/process.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const node = process.execPath;

describe('spawnProcess', () => {
  test('waits for a matching stdout line, including one printed before the wait', async () => {
    await using proc = spawnProcess(node, ['-e', "console.log('one'); setTimeout(() => console.log('two'), 50); setInterval(() => {}, 1000)"]);
    expect(await proc.waitForStdout((l) => l === 'two')).toBe('two');
    expect(await proc.waitForStdout((l) => l === 'one')).toBe('one');
  });

  test('a process that exits before the line: the error carries its exit and stderr', async () => {
    await using proc = spawnProcess(node, ['-e', "console.error('boom: bad things'); process.exit(3)"], { name: 'doomed' });
    await expect(proc.waitForStdout((l) => l === 'never', { description: 'the never line' })).rejects.toThrow(
      /doomed exited \(code 3[\s\S]*the never line[\s\S]*boom: bad things/,
    );
  });

  test('a line that never comes times out with a useful message', async () => {
    await using proc = spawnProcess(node, ['-e', "console.log('alive'); setInterval(() => {}, 1000)"], { name: 'quiet' });
    await expect(proc.waitForStdout((l) => l === 'never', { timeoutMs: 200 })).rejects.toThrow(/timed out after 200 ms[\s\S]*quiet[\s\S]*alive/);
  });

  test('kill escalates to SIGKILL when SIGTERM is ignored', async () => {
    await using proc = spawnProcess(node, ['-e', "process.on('SIGTERM', () => {}); console.log('ready'); setInterval(() => {}, 1000)"]);
    await proc.waitForStdout((l) => l === 'ready');
    expect(await proc.kill('SIGTERM', 200)).toEqual({ code: null, signal: 'SIGKILL' });
    expect(alive(proc.pid)).toBe(false);
  });

  test('runProcess returns code, stdout and stderr', async () => {
    const res = await runProcess(node, ['-e', "console.log('out'); console.error('err'); process.exit(2)"]);
    expect(res).toEqual({ code: 2, signal: null, stdout: 'out\n', stderr: 'err\n' });
  });
});

describe('startCloud', () => {
  test('dispose kills the process and removes its temp dir, also when the test body throws', async () => {
    let pid = 0;
    let root = '';
    const body = async () => {
      await using cloud = await startCloud();
      pid = cloud.process.pid;
      root = dirname(cloud.dataDir);
      expect(alive(pid)).toBe(true);
      throw new Error('the test failed');
    };
    await expect(body()).rejects.toThrow('the test failed');
    expect(pid).toBeGreaterThan(0);
    expect(alive(pid)).toBe(false);
    expect(existsSync(root)).toBe(false);
  });

  test('a given data dir is kept on dispose', async () => {
    await using dir = await makeTempDir();
    const dataDir = join(dir.path, 'data');
    {
      await using cloud = await startCloud({ dataDir });
      expect(cloud.dataDir).toBe(dataDir);
    }
    expect(existsSync(join(dataDir, 'admin-key'))).toBe(true);
  });

  test('a serve that dies at start: startCloud rejects with its stderr', async () => {
    await expect(startCloud({ args: ['--http-port', '99999'] })).rejects.toThrow(/exited \(code 1[\s\S]*invalid configuration: httpPort/);
  });
});
