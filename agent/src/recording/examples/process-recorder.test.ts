import { mkdir, readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir, removeTempDirs } from '../../test-support.js';
import { systemScheduler } from '../../time.js';
import { ProcessRecorder } from './process-recorder.js';

afterEach(removeTempDirs);

// A stand-in for `ros2 bag record`: appends to a file until SIGINT, then writes a trailer and exits 0.
const FAKE_RECORDER = `
const fs = require('node:fs');
const fd = fs.openSync('bag.mcap', 'w');
const timer = setInterval(() => fs.writeSync(fd, 'msg\\n'), 10);
process.on('SIGINT', () => { clearInterval(timer); fs.writeSync(fd, 'END\\n'); fs.closeSync(fd); process.exit(0); });
`;

function recorder(): ProcessRecorder {
  return new ProcessRecorder({ command: process.execPath, args: () => ['-e', FAKE_RECORDER], scheduler: systemScheduler, stopTimeoutMs: 10_000 });
}

async function episodeDir(): Promise<string> {
  const dir = join(await makeTempDir(), 'episodes', 'ep_x');
  await mkdir(dir, { recursive: true });
  return dir;
}

const info = { robotId: 'rb', episodeId: 'ep_x', startedAt: 0 };
const grown = (dir: string) => expect.poll(async () => (await stat(join(dir, 'bag.mcap')).catch(() => ({ size: 0 }))).size, { timeout: 10_000 }).toBeGreaterThan(20);

describe('ProcessRecorder (the docs example)', () => {
  it('stop() interrupts the program, which closes its file; the pid file is gone and not a recorded file', async () => {
    const dir = await episodeDir();
    const handle = await recorder().start(dir, info);
    await grown(dir);
    expect(await handle.stop()).toEqual({ files: ['bag.mcap'], messageCount: null });
    expect(await readFile(join(dir, 'bag.mcap'), 'utf8')).toMatch(/^(msg\n)+END\n$/);
    expect(await readdir(dir)).toEqual(['bag.mcap']);
  });

  it('abort() kills the program and deletes its files', async () => {
    const dir = await episodeDir();
    const handle = await recorder().start(dir, info);
    await grown(dir);
    await handle.abort();
    expect(await readdir(dir)).toEqual([]);
  });

  it('recover() after an agent crash stops the program still writing, so its file is closed', async () => {
    const dir = await episodeDir();
    // The agent "dies": the handle is never used again, the program goes on writing.
    await recorder().start(dir, info);
    await grown(dir);
    const recovered = await recorder().recover(dir);
    expect(recovered).toEqual({ files: ['bag.mcap'], messageCount: null });
    expect(await readFile(join(dir, 'bag.mcap'), 'utf8')).toMatch(/END\n$/);
  });
});
