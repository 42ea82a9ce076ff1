/**
 * The `command` recorder with `ros2 bag record --storage mcap` as a ROS 2 robot runs it: the
 * stand-in `ros2` (test/support/fake-ros2/ros2) writes its bag with Python's `rosbags`, and the
 * bag is read back with `rosbags` (AnyReader), so both ends are code that is not ours. The agent
 * CLI started from a config file is the lead's end-to-end test; this one drives CommandRecorder.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CommandRecorder, CommandRecorderConfigSchema, type CommandRecorderConfigInput } from '../agent/src/recording/command-recorder.js';
import type { RecordingInfo } from '../agent/src/recording/recorder.js';
import { captureLogs, type LogCapture } from '../agent/src/test-support.js';
import { systemScheduler } from '../agent/src/time.js';
import { ensurePythonEnv } from './support/python.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const FAKE_ROS2_DIR = join(ROOT, 'test', 'support', 'fake-ros2');
/** The built recorder, for a host process the test kills with SIGKILL (e2e tests run after the build). */
const BUILT_RECORDER = join(ROOT, 'agent', 'dist', 'recording', 'command-recorder.js');
const BUILT_TIME = join(ROOT, 'agent', 'dist', 'time.js');

const RECORD = ['ros2', 'bag', 'record', '--storage', 'mcap', '--output', '{dir}/bag', '/joint_states'];
const JOINT_NAMES = ['shoulder_pan', 'shoulder_lift', 'elbow', 'wrist_1', 'wrist_2', 'wrist_3'];

let python: string;
/** The venv's python first, so the stand-in's `#!/usr/bin/env python3` finds `rosbags`. */
let robotEnv: Record<string, string | undefined>;

beforeAll(() => {
  python = ensurePythonEnv();
  robotEnv = { ...process.env, PATH: `${dirname(python)}:${FAKE_ROS2_DIR}:${process.env.PATH ?? ''}` };
});

const dirs: string[] = [];
const cleanups: (() => void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) c();
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

/** An episode directory whose path holds a space and a quote, as a robot's data dir may. */
async function episodeDir(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'fa-ros2-'));
  dirs.push(root);
  const dir = join(root, "robot's data", 'episodes', 'ep_1');
  await mkdir(dir, { recursive: true });
  return dir;
}

function recorder(input: Omit<CommandRecorderConfigInput, 'kind'>, logs: LogCapture): CommandRecorder {
  const config = CommandRecorderConfigSchema.parse({ kind: 'command', stop_timeout_ms: 20_000, start_grace_ms: 300, ...input });
  return new CommandRecorder(config, { scheduler: systemScheduler, logger: logs.logger, env: robotEnv });
}

const info: RecordingInfo = { robotId: 'rbt_test', episodeId: 'ep_1', startedAt: 0, taskId: null };
/** rosbag2's "Subscribed to topic" line: from the stand-in, once a message is in the bag. */
const subscribed = (text: () => string) => expect.poll(text, { timeout: 30_000 }).toContain("Subscribed to topic '/joint_states'");

interface BagSummary {
  topics: Record<string, string>;
  message_count: number;
  count: number;
  names: string[][];
  stamps_increase: boolean;
}

/** Reads the bag directory with rosbags' AnyReader (it needs metadata.yaml) in the test venv. */
function readBag(bag: string): BagSummary {
  const code = `
import json, sys
from pathlib import Path
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore
with AnyReader([Path(sys.argv[1])], default_typestore=get_typestore(Stores.ROS2_HUMBLE)) as reader:
    names, stamps = [], []
    for conn, _t, raw in reader.messages(connections=[c for c in reader.connections if c.topic == '/joint_states']):
        msg = reader.deserialize(raw, conn.msgtype)
        names.append(list(msg.name))
        stamps.append(msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec)
    print(json.dumps({
        'topics': {c.topic: c.msgtype for c in reader.connections},
        'message_count': reader.message_count,
        'count': len(names),
        'names': [list(n) for n in {tuple(n) for n in names}],
        'stamps_increase': all(a < b for a, b in zip(stamps, stamps[1:])),
    }))
`;
  const out = spawnSync(python, ['-c', code, bag], { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`rosbags could not read ${bag}: ${out.stderr}`);
  return JSON.parse(out.stdout) as BagSummary;
}

function expectJointStates(summary: BagSummary): void {
  expect(summary.topics).toEqual({ '/joint_states': 'sensor_msgs/msg/JointState' });
  expect(summary.count).toBeGreaterThan(0);
  expect(summary.message_count).toBe(summary.count);
  expect(summary.names).toEqual([JOINT_NAMES]);
  expect(summary.stamps_increase).toBe(true);
}

describe('the command recorder with `ros2 bag record` (stand-in writing with rosbags)', () => {
  it('records a bag that rosbags reads back: JointState with its joint names, metadata.yaml written on SIGINT', async () => {
    const dir = await episodeDir();
    const logs = captureLogs();
    const handle = await recorder({ command: RECORD }, logs).start(dir, info);
    await subscribed(() => logs.messages().join('\n'));
    const files = await handle.stop();
    expect(files).toEqual({ files: ['bag/bag.mcap', 'bag/metadata.yaml'], messageCount: null });
    expectJointStates(readBag(join(dir, 'bag')));
    expect(logs.records.find((r) => r.msg === 'recorder program exited')).toMatchObject({ code: 0, signal: null });
  });

  it('runs the documented shell form (source a setup file, then exec ros2) with the directory quoted', async () => {
    const dir = await episodeDir();
    const logs = captureLogs();
    // A ROS 2 workspace's setup file stands for /opt/ros/humble/setup.bash.
    const setup = join(dirname(dirname(dirname(dir))), 'setup.bash');
    await writeFile(setup, 'export ROS_DOMAIN_ID=7\n');
    const shell = `source ${setup} && test "$ROS_DOMAIN_ID" = 7 && exec ros2 bag record --storage mcap --output {dir}/bag /joint_states`;
    const handle = await recorder({ shell }, logs).start(dir, info);
    await subscribed(() => logs.messages().join('\n'));
    expect((await handle.stop()).files).toEqual(['bag/bag.mcap', 'bag/metadata.yaml']);
    expectJointStates(readBag(join(dir, 'bag')));
  });

  it('refuses the start when ros2 exits at once, with its reason', async () => {
    const dir = await episodeDir();
    const err = await recorder({ command: ['ros2', 'bag', 'record', '--storage', 'sqlite3', '--output', '{dir}/bag'], start_grace_ms: 30_000 }, captureLogs())
      .start(dir, info)
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'failed', message: "ros2 exited with code 2 at start: fake ros2: only --storage mcap is supported, not 'sqlite3'" });
    expect(await readdir(dir)).toEqual([]);
  });

  it('after the agent is killed with SIGKILL, recover() stops the orphaned ros2, whose bag rosbags then reads', async () => {
    expect(existsSync(BUILT_RECORDER), `${BUILT_RECORDER} is missing: run \`npx tsc -b tsconfig.build.json\` first`).toBe(true);
    const dir = await episodeDir();
    // A stand-in for the agent: it starts the recorder and is then killed, leaving ros2 running.
    const host = `
      const { CommandRecorder, CommandRecorderConfigSchema } = await import(${JSON.stringify(pathToFileURL(BUILT_RECORDER).href)});
      const { systemScheduler } = await import(${JSON.stringify(pathToFileURL(BUILT_TIME).href)});
      const line = (level) => (fields, msg) => console.log(JSON.stringify({ level, ...fields, msg }));
      const logger = { info: line('info'), warn: line('warn'), error: line('error'), debug: () => {} };
      const config = CommandRecorderConfigSchema.parse({ kind: 'command', command: ${JSON.stringify(RECORD)}, start_grace_ms: 300 });
      await new CommandRecorder(config, { scheduler: systemScheduler, logger, env: process.env }).start(process.argv[1], ${JSON.stringify(info)});
      setInterval(() => {}, 1000);
    `;
    const agent = spawn(process.execPath, ['--input-type=module', '-e', host, dir], { env: robotEnv, stdio: ['ignore', 'pipe', 'inherit'] });
    cleanups.push(() => agent.kill('SIGKILL'));
    let output = '';
    agent.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')));
    await subscribed(() => output);
    const { pid } = JSON.parse(await readFile(join(dir, '.tmp-recorder.pid'), 'utf8')) as { pid: number };
    agent.kill('SIGKILL');
    await new Promise((r) => agent.once('exit', r));
    // ros2 outlived its agent, still recording: its bag has no metadata.yaml yet.
    expect(() => process.kill(pid, 0)).not.toThrow();
    expect(await readdir(join(dir, 'bag'))).toEqual(['bag.mcap']);

    const logs = captureLogs();
    const recovered = await recorder({ command: RECORD }, logs).recover(dir);
    expect(recovered).toEqual({ files: ['bag/bag.mcap', 'bag/metadata.yaml'], messageCount: null });
    expect(logs.messages()).toContain('stopping a recorder program left running by a previous agent');
    expect(logs.messages()).not.toContain('recorder program did not stop on SIGINT; killing it');
    expectJointStates(readBag(join(dir, 'bag')));
  });
});
