/**
 * `fleet datasets inspect-recording` as a user runs it: the built CLI on a rosbag2 directory
 * written by Python's rosbags, with no cloud, no API key and no config file; its table, its
 * `--json` object, the mapping `--mapping-out` writes (which parseMapping takes), and its exit
 * codes on bad input (2 for a path that does not exist, 1 with a code for a file that is not
 * MCAP or an MCAP cut short).
 */
import { execFileSync } from 'node:child_process';
import { copyFile, readFile, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { parseMapping } from '../packages/lerobot/src/source/mapping.js';
import { cleanEnv, makeTempDir, REPO_ROOT, type TempDir } from './support/cloud.js';
import { runProcess, type RunResult } from './support/process.js';
import { ensurePythonEnv } from './support/python.js';

const FLEET_CLI = join(REPO_ROOT, 'packages', 'client', 'dist', 'cli.js');
const FIXTURES = join(REPO_ROOT, 'packages', 'recordings', 'test-fixtures');

let tmp: TempDir;
let bag: string;

function fleet(args: readonly string[]): Promise<RunResult> {
  return runProcess(process.execPath, [FLEET_CLI, ...args], {
    name: 'fleet datasets inspect-recording',
    cwd: tmp.path,
    // Nothing to reach: no URL, no key, an empty home.
    env: cleanEnv({ HOME: tmp.path, XDG_CONFIG_HOME: undefined, FLEET_URL: undefined, FLEET_API_KEY: undefined }),
    timeoutMs: 60_000,
  });
}

beforeAll(async () => {
  tmp = await makeTempDir('fleet-inspect-');
  bag = join(tmp.path, 'bag');
  execFileSync(ensurePythonEnv(), [join(FIXTURES, 'write_rosbag2.py'), bag, join(tmp.path, 'bag.json')]);
}, 600_000);

afterAll(async () => {
  await tmp?.[Symbol.asyncDispose]();
});

describe('fleet datasets inspect-recording', () => {
  test('prints the recording, a row per topic and the proposed mapping, and writes it with --mapping-out', async () => {
    const r = await fleet(['datasets', 'inspect-recording', bag, '--mapping-out', 'mapping.json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(/^recording +.*bag \(rosbag2, 1 file\)$/m);
    expect(r.stdout).toMatch(/^duration +2\.000 s$/m);
    expect(r.stdout).toMatch(/^TOPIC +TYPE +ENCODING +COUNT +RATE +STAMP +MAPPED AS +CONTENT$/m);
    expect(r.stdout).toMatch(/^\/joint_states +sensor_msgs\/msg\/JointState +cdr\/ros2msg +101 +50 Hz +header\.stamp -3 ms +observation\.state +name\[3\] position\[3\] velocity\[3\] effort\[3\]$/m);
    expect(r.stdout).toMatch(/^\/camera\/front\/image_raw\/compressed +sensor_msgs\/msg\/CompressedImage .* observation\.images\.front +jpeg 57x43$/m);
    expect(r.stdout).toMatch(/^\/camera\/depth\/image_raw .* 16UC1 8x6 \(not read\)$/m);
    expect(r.stdout).toContain('/joint_states name: j3, j1, j2');
    const written = JSON.parse(await readFile(join(tmp.path, 'mapping.json'), 'utf8')) as unknown;
    expect(r.stdout).toContain(JSON.stringify(written, null, 2));
    expect(parseMapping(written).features['observation.state']).toEqual({ topic: '/joint_states', fields: ['position'], names_from: 'name' });
  });

  test('--json prints one object {recording, topics, mapping}', async () => {
    const r = await fleet(['--json', 'datasets', 'inspect-recording', bag]);
    expect(r.code, r.stderr).toBe(0);
    const body = JSON.parse(r.stdout) as { recording: { format: string; message_count: number }; topics: { topic: string; rate_hz: number }[]; mapping: unknown };
    expect(Object.keys(body)).toEqual(['recording', 'topics', 'mapping']);
    expect(body.recording).toMatchObject({ format: 'rosbag2', message_count: 262 });
    expect(body.topics.find((t) => t.topic === '/joint_commands')?.rate_hz).toBe(25);
    expect(body.mapping).toEqual(JSON.parse(await readFile(join(tmp.path, 'mapping.json'), 'utf8')));
  });

  test('a path that does not exist, or a --mapping-out that cannot be written, is a usage error (exit 2), one line', async () => {
    const r = await fleet(['datasets', 'inspect-recording', join(tmp.path, 'nope')]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^fleet: .*nope: no such file or directory$/)]);
    expect(r.stdout).toBe('');
    const w = await fleet(['datasets', 'inspect-recording', bag, '--mapping-out', join(tmp.path, 'no-such-dir', 'm.json')]);
    expect(w.code).toBe(2);
    expect(w.stderr).toMatch(/^fleet: --mapping-out .*m\.json: ENOENT/);
  });

  test('a file that is not MCAP and an MCAP cut short fail with their codes (exit 1)', async () => {
    const notMcap = join(tmp.path, 'notes.mcap');
    await writeFile(notMcap, 'not a recording\n');
    const a = await fleet(['datasets', 'inspect-recording', notMcap]);
    expect(a.code).toBe(1);
    expect(a.stderr).toMatch(/^fleet: not_mcap: .*notes\.mcap: not an MCAP file/);
    const cut = join(tmp.path, 'cut.mcap');
    await copyFile(join(bag, 'bag.mcap'), cut);
    await truncate(cut, Math.floor((await stat(cut)).size / 2));
    const b = await fleet(['datasets', 'inspect-recording', cut, '--mapping-out', 'cut.json']);
    expect(b.code).toBe(1);
    expect(b.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^fleet: no_summary: .*cut\.mcap: .*mcap recover/)]);
    await expect(stat(join(tmp.path, 'cut.json'))).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
