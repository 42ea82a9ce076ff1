import { spawn } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { cleanEnv, makeTempDir, REPO_ROOT, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { episodeFiles, getEpisode } from './support/episodes.js';
import { runProcess, type RunResult } from './support/process.js';
import { ensurePythonEnv } from './support/python.js';
import { sendCommand, startAgentProcess, type AgentProcess } from './support/robots.js';
import { waitFor } from './support/wait.js';

/**
 * The ROS 2 examples docs/robots.md hands a robot team, run as the team runs them:
 * docs/examples/ros2-action.py as the configured action of a real `fleet-agent start --config`,
 * each robot command through /v1 as the API answers it; docs/examples/ros2-button.py --press
 * against the same agent's control socket, the episode recorded by `ros2 bag record` and reported.
 * The `ros2` is the stand-in test/support/fake-ros2/ros2: it prints what ros2cli prints, and what
 * its server does is chosen by each action's environment (FAKE_ROS2_*), so the config maps one
 * command per behaviour.
 */

const FAKE_ROS2_DIR = join(REPO_ROOT, 'test', 'support', 'fake-ros2');
const WRAPPER = join(REPO_ROOT, 'docs', 'examples', 'ros2-action.py');
const BUTTON = join(REPO_ROOT, 'docs', 'examples', 'ros2-button.py');
const GOAL = '{trajectory: {joint_names: [shoulder_pan, elbow], points: [{positions: [0.0, 1.57], time_from_start: {sec: 2}}]}}';

let python: string;
/** The venv's python3 first (the stand-in needs rosbags), then the system. */
let venvPath: string;
let dir: TempDir;
let cloud: CloudProcess;
let robot: AgentProcess;
let configFile: string;
let callsFile: string;

interface Call {
  pid: number;
  argv: string[];
}

/** What the stand-in ros2 was run with for a service or action, in order. */
async function calls(): Promise<Call[]> {
  const text = await readFile(callsFile, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Call);
}

async function callOf(name: string): Promise<Call> {
  const found = (await calls()).filter((c) => c.argv[2] === name);
  expect(found, `one ros2 call for ${name}`).toHaveLength(1);
  return found[0]!;
}

beforeAll(async () => {
  python = ensurePythonEnv();
  venvPath = `${dirname(python)}:/usr/bin:/bin`;
  dir = await makeTempDir('fa-ros2ex-');
  callsFile = join(dir.path, 'ros2-calls.jsonl');
  // Stands for /opt/ros/humble/setup.bash: it puts ros2 on PATH, as the real one does.
  const setup = join(dir.path, 'setup.bash');
  await writeFile(setup, `export ROS_DISTRO=humble\nexport PATH="${FAKE_ROS2_DIR}:$PATH"\n`);

  /** One action as docs/robots.md writes it, with the stand-in's behaviour in its env. */
  const action = (command: string, args: string, fake: Record<string, string> = {}, timeoutMs?: number): string[] => [
    `  ${command}:`,
    `    shell: ${JSON.stringify(`source ${setup} && exec python3 ${WRAPPER} ${args}`)}`,
    `    env: ${JSON.stringify({ PATH: venvPath, FAKE_ROS2_CALLS: callsFile, ...fake })}`,
    ...(timeoutMs !== undefined ? [`    timeout_ms: ${timeoutMs}`] : []),
  ];
  configFile = join(dir.path, 'agent.yaml');
  await writeFile(
    configFile,
    [
      'recorder:',
      '  kind: command',
      `  command: [${JSON.stringify(join(FAKE_ROS2_DIR, 'ros2'))}, bag, record, --storage, mcap, --output, "{dir}/bag", /joint_states]`,
      `  env: { PATH: ${JSON.stringify(venvPath)} }`,
      '  stop_timeout_ms: 20000',
      // Generous bounds for a loaded machine; the two timeout cases set their own.
      'action_timeout_ms: 30000',
      'actions:',
      ...action('go_home', `--timeout 20 service /go_home std_srvs/srv/Trigger`, { FAKE_ROS2_SERVICE_MESSAGE: 'arrived at home' }),
      ...action('stack.stop', `--timeout 20 service /stack/stop std_srvs/srv/Trigger`, { FAKE_ROS2_SERVICE_SUCCESS: 'false', FAKE_ROS2_SERVICE_MESSAGE: 'the controllers are still running' }),
      ...action('go_to_start', `--timeout 20 action /arm/go_to_start control_msgs/action/FollowJointTrajectory '${GOAL}'`),
      ...action('start_autonomous', `--timeout 20 action /arm/follow control_msgs/action/FollowJointTrajectory '${GOAL}'`, { FAKE_ROS2_ACTION_STATUS: 'ABORTED', FAKE_ROS2_ACTION_ERROR: 'path blocked at waypoint 1' }),
      // No server: whatever the wrapper's timeout, ros2 never gets past waiting for one.
      ...action('stop_autonomous', `--timeout 2 action /autonomy/stop control_msgs/action/FollowJointTrajectory '{}'`, { FAKE_ROS2_NO_SERVER: '1' }),
      // The agent's timeout before the wrapper's: the agent kills the whole process group.
      ...action('stack.start', `--timeout 20 action /stack/start control_msgs/action/FollowJointTrajectory '{}'`, { FAKE_ROS2_HANG: '1' }, 3000),
      // The wrapper's timeout before the agent's: ros2 gets SIGINT and cancels the goal. Long
      // enough for the goal to be accepted first on a loaded machine (else: no server).
      ...action('stack.status', `--timeout 4 action /stack/status control_msgs/action/FollowJointTrajectory '{}'`, { FAKE_ROS2_HANG: '1' }),
      '',
    ].join('\n'),
  );
  // The cloud waits longer than any action may take, so every answer is the robot's.
  cloud = await startCloud({ args: ['--command-timeout-ms', '60000'] });
  robot = await startAgentProcess(cloud, { simulate: false, args: ['--config', configFile] });
}, 600_000);

afterAll(async () => {
  await robot?.[Symbol.asyncDispose]();
  await cloud?.[Symbol.asyncDispose]();
  await dir?.[Symbol.asyncDispose]();
});

/** The API's answer to one command: 200, `result` as the robot answered. */
async function answer(route: string, command: string): Promise<Record<string, unknown>> {
  const r = await sendCommand(cloud, robot.robotId, route);
  expect(r.status, `${route}: ${JSON.stringify(r.body)}`).toBe(200);
  expect(r.body.result).toMatchObject({ command, robot_id: robot.robotId, cmd_id: expect.stringMatching(/^cmd_/) as string });
  return r.body.result!;
}

/** A decline as the API answers it: 200 with `result.ok` false and the robot's {code, message}. */
async function declined(route: string, command: string, code: string): Promise<string> {
  const result = await answer(route, command);
  expect(result).toEqual({ ok: false, error: { code, message: expect.any(String) as string }, cmd_id: expect.any(String) as string, command, robot_id: robot.robotId });
  return (result.error as { message: string }).message;
}

describe('docs/examples/ros2-action.py as configured actions, through /v1', () => {
  test('a service that answers success=True: 200 with the service, its response and its message', async () => {
    const result = await answer('go-home', 'go_home');
    expect(result).toEqual({
      service: '/go_home',
      type: 'std_srvs/srv/Trigger',
      response: { success: true, message: 'arrived at home' },
      success: true,
      message: 'arrived at home',
      ok: true,
      cmd_id: result.cmd_id,
      command: 'go_home',
      robot_id: robot.robotId,
    });
    // No request YAML in the config: the wrapper sends `{}`, the defaults of the request.
    expect((await callOf('/go_home')).argv).toEqual(['service', 'call', '/go_home', 'std_srvs/srv/Trigger', '{}']);
  });

  test('a service that answers success=False: 200 with the decline failed and the service\'s message', async () => {
    expect(await declined('stack/stop', 'stack.stop', 'failed')).toBe('/stack/stop: the controllers are still running');
  });

  test('an action goal that SUCCEEDED: 200 with the goal id, the status and the result ros2 printed', async () => {
    const result = await answer('go-to-start', 'go_to_start');
    expect(result).toMatchObject({
      action: '/arm/go_to_start',
      type: 'control_msgs/action/FollowJointTrajectory',
      goal_id: expect.stringMatching(/^[0-9a-f]{32}$/) as string,
      status: 'SUCCEEDED',
      result: "error_code: 0\nerror_string: ''",
      ok: true,
    });
    // The goal reaches ros2 as one argument, as written in agent.yaml.
    expect((await callOf('/arm/go_to_start')).argv).toEqual(['action', 'send_goal', '/arm/go_to_start', 'control_msgs/action/FollowJointTrajectory', GOAL]);
  });

  test('an action goal that was ABORTED: 200 with the decline failed, carrying the result', async () => {
    const message = await declined('start-autonomous', 'start_autonomous', 'failed');
    expect(message).toContain('the goal on /arm/follow finished ABORTED');
    expect(message).toContain('path blocked at waypoint 1');
  });

  test('no action server: 200 with the decline invalid_state, no goal sent', async () => {
    expect(await declined('stop-autonomous', 'stop_autonomous', 'invalid_state')).toBe(
      "no action server /autonomy/stop answered within 2 s (is the robot's stack running?); no goal was sent",
    );
  });

  test('a goal that never finishes, with the agent timing out first: 200 with the decline action_timeout, ros2 killed', async () => {
    expect(await declined('stack/start', 'stack.start', 'action_timeout')).toContain('did not answer within 3000 ms');
    const { pid } = await callOf('/stack/start');
    await waitFor(
      async () => {
        const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
        // Gone, or a zombie left to a parent that does not reap (PID 1 in a container).
        return stat === null || stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z' ? true : undefined;
      },
      { description: `the stand-in ros2 (pid ${pid}) killed with the wrapper's process group` },
    );
  });

  test("a goal that never finishes, with the wrapper timing out first: 200 with the decline failed, the goal canceled", async () => {
    const message = await declined('stack/status', 'stack.status', 'failed');
    expect(message).toMatch(/^the goal [0-9a-f]{32} on \/stack\/status did not finish within 4 s; it was canceled$/);
  });
});

/** The wrapper run by hand (as a team tries it before configuring it): the agent's request on stdin. */
function runWrapper(args: readonly string[], fake: Record<string, string> = {}, path = `${dirname(python)}:${FAKE_ROS2_DIR}:/usr/bin:/bin`): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(python, [WRAPPER, ...args], { env: { PATH: path, FAKE_ROS2_CALLS: callsFile, ...fake }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
    child.stdin.end(JSON.stringify({ command: 'go_home', args: {}, robot_id: 'rb_test', cmd_id: 'cmd_by_hand' }));
  });
}

describe('docs/examples/ros2-action.py on its own: exit 3 with a decline, exit 1 with a reason', () => {
  test('a request in YAML reaches ros2 as given, and a response is read field by field', async () => {
    const r = await runWrapper(['service', '/gripper/enable', 'std_srvs/srv/SetBool', '{data: true}'], { FAKE_ROS2_SERVICE_MESSAGE: "it's open" });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ service: '/gripper/enable', type: 'std_srvs/srv/SetBool', response: { success: true, message: "it's open" }, success: true, message: "it's open" });
    expect((await callOf('/gripper/enable')).argv).toEqual(['service', 'call', '/gripper/enable', 'std_srvs/srv/SetBool', '{data: true}']);
    // What ros2 printed went to stderr, for the agent's log.
    expect(r.stderr).toContain("std_srvs.srv.SetBool_Response(success=True, message=\"it's open\")");
  });

  test('a goal the server rejects: exit 3, invalid_state', async () => {
    const r = await runWrapper(['action', '/arm/rejecting', 'control_msgs/action/FollowJointTrajectory', '{}'], { FAKE_ROS2_ACTION_STATUS: 'REJECTED' });
    expect(r.code, r.stderr).toBe(3);
    expect(JSON.parse(r.stdout)).toEqual({ code: 'invalid_state', message: 'the action server /arm/rejecting rejected the goal' });
  });

  test('a goal that was CANCELED by someone else: exit 3, failed', async () => {
    const r = await runWrapper(['action', '/arm/canceled', 'control_msgs/action/FollowJointTrajectory', '{}'], { FAKE_ROS2_ACTION_STATUS: 'CANCELED' });
    expect(r.code, r.stderr).toBe(3);
    expect(JSON.parse(r.stdout)).toMatchObject({ code: 'failed', message: expect.stringContaining('finished CANCELED') as string });
  });

  test('no service server: exit 3, invalid_state; a server that takes the request and never answers: exit 3, failed', async () => {
    const none = await runWrapper(['--timeout', '1', 'service', '/nobody', 'std_srvs/srv/Trigger'], { FAKE_ROS2_NO_SERVER: '1' });
    expect(none.code, none.stderr).toBe(3);
    expect(JSON.parse(none.stdout)).toMatchObject({ code: 'invalid_state', message: expect.stringContaining('no server for the service /nobody') as string });
    // Long enough for the request to be made first on a loaded machine (else: no server).
    const hung = await runWrapper(['--timeout', '4', 'service', '/slow', 'std_srvs/srv/Trigger'], { FAKE_ROS2_HANG: '1' });
    expect(hung.code, hung.stderr).toBe(3);
    expect(JSON.parse(hung.stdout)).toMatchObject({ code: 'failed', message: expect.stringContaining('the request was sent, so it may still act on it') as string });
  });

  test('a type ros2 does not know: exit 1, ros2\'s reason on stderr, nothing on stdout', async () => {
    const r = await runWrapper(['service', '/go_home', 'my_msgs/srv/NotInstalled']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('ros2 service call /go_home my_msgs/srv/NotInstalled exited with code 1: The passed service type is invalid');
  });

  test('no ros2 on PATH: exit 1, saying to source the ROS 2 setup file', async () => {
    const r = await runWrapper(['service', '/go_home', 'std_srvs/srv/Trigger'], {}, '/usr/bin:/bin');
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('ros2 not found on PATH (/usr/bin:/bin); source the ROS 2 setup file first');
  });
});

describe('docs/examples/ros2-button.py --press against the running agent', () => {
  const press = (verb: string, where: string[] = ['--data-dir', robot.dataDir]) =>
    runProcess(python, [BUTTON, '--press', verb, ...where], { name: `ros2-button.py --press ${verb}`, env: cleanEnv({ PATH: venvPath }) });

  test('start then finish: the episode is recorded by ros2 bag record and reported to the cloud', async () => {
    const started = await press('start');
    expect(started.code, started.stderr).toBe(0);
    const episodeId = (JSON.parse(started.stdout) as { episode_id: string }).episode_id;
    expect(episodeId).toMatch(/^ep_/);
    // Let the stand-in rosbag2 open its bag before the episode ends, so there is a recording.
    await waitFor(async () => ((await readdir(join(robot.dataDir, 'episodes', episodeId, 'bag')).catch(() => [] as string[])).some((f) => f.endsWith('.mcap')) ? true : undefined), {
      timeoutMs: 60_000,
      description: 'ros2 bag record writing its bag',
    });

    // A second start while recording is the agent's refusal, printed on stderr, exit 1.
    const again = await press('start');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('the agent refused episode.start: invalid_state');

    const finished = await press('finish');
    expect(finished.code, finished.stderr).toBe(0);
    expect(JSON.parse(finished.stdout)).toMatchObject({ episode_id: episodeId });

    const reported = await waitFor(async () => {
      const ep = await getEpisode(cloud, episodeId);
      return ep?.outcome === 'success' ? ep : undefined;
    }, { timeoutMs: 60_000, description: `episode ${episodeId} reported` });
    expect(reported.robot_id).toBe(robot.robotId);
    const { manifest } = await episodeFiles(robot.dataDir, episodeId);
    expect(manifest.files.map((f) => f.path).sort()).toEqual([expect.stringMatching(/^bag\/[^/]+\.mcap$/), 'bag/metadata.yaml']);
  });

  test('a socket that is not there: exit 1, naming it', async () => {
    const missing = join(dir.path, 'no-agent', 'agent.sock');
    const r = await press('start', ['--socket', missing]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`cannot reach the agent at ${missing}`);
  });
});
