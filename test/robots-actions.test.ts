import { chmod, readFile, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { makeTempDir, startCloud, type CloudProcess, type TempDir } from './support/cloud.js';
import { runAgentCli, sendCommand, startAgentProcess, type AgentProcess } from './support/robots.js';
import { waitFor } from './support/wait.js';

/**
 * Robot commands answered by what the agent's config file maps them to: programs and a shell
 * command (real child processes of the real `fleet-agent start`) and a robot-local HTTP endpoint,
 * each outcome as the API answers it. Every command reaches the robot, so every answer is a 200:
 * the result, or the robot's decline in `result` (docs/api.md, Robot commands).
 */

let cloud: CloudProcess;
let robot: AgentProcess;
let dir: TempDir;
let endpoint: Server;
let configFile: string;
/** What the endpoint answers next: [status, body]. */
let endpointAnswer: [number, string] = [200, '{}'];
const endpointBodies: unknown[] = [];

async function script(name: string, body: string): Promise<string> {
  const file = join(dir.path, name);
  await writeFile(file, `#!/bin/sh\n${body}\n`);
  await chmod(file, 0o755);
  return file;
}

const runsOf = async (name: string) => (await readFile(join(dir.path, `${name}.runs`), 'utf8').catch(() => '')).split('\n').filter(Boolean).length;

beforeAll(async () => {
  dir = await makeTempDir('fa-act-');
  endpoint = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      endpointBodies.push(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      res.writeHead(endpointAnswer[0], { 'content-type': 'application/json' });
      res.end(endpointAnswer[1]);
    });
  });
  await new Promise<void>((resolve) => endpoint.listen(0, '127.0.0.1', resolve));
  const port = (endpoint.address() as AddressInfo).port;
  await writeFile(join(dir.path, 'setup.bash'), 'export ROBOT_WS=humble\n');
  const goHome = await script('go-home', `echo run >> "${dir.path}/go-home.runs"\ncat > "${dir.path}/go-home.stdin"\nprintf '{"pose": "home", "speed": "%s", "domain": "%s"}' "$2" "$ROS_DOMAIN_ID"`);
  const decline = await script('decline', `echo run >> "${dir.path}/decline.runs"\necho '{"code": "invalid_state", "message": "the arm is in a protective stop"}'\nexit 3`);
  const fail = await script('fail', `echo 'checking the controller' >&2\necho 'controller not reachable on /dev/ttyUSB0' >&2\nexit 1`);
  const hang = await script('hang', `echo $$ > "${dir.path}/hang.pid"\nexec sleep 1000`);
  const chatty = await script('chatty', `head -c 1048576 /dev/zero | tr '\\0' 'a'`);
  configFile = join(dir.path, 'agent.yaml');
  await writeFile(
    configFile,
    [
      'action_output_max_bytes: 4096',
      'actions:',
      `  go_home:`,
      `    program: [${goHome}, --speed, slow]`,
      `    env: { ROS_DOMAIN_ID: "7" }`,
      `  go_to_start:`,
      `    program: [${decline}]`,
      `  start_autonomous:`,
      `    program: [${fail}]`,
      `  stop_autonomous:`,
      `    program: [${hang}]`,
      `    timeout_ms: 3000`,
      `  stack.start:`,
      `    shell: 'source "${dir.path}/setup.bash" && exec ${chatty}'`,
      `  stack.status:`,
      `    http: http://127.0.0.1:${port}/stack/status`,
      `    timeout_ms: 5000`,
      '  # stack.stop is not mapped',
      '',
    ].join('\n'),
  );
  cloud = await startCloud();
  robot = await startAgentProcess(cloud, { simulate: false, args: ['--config', configFile] });
});

afterAll(async () => {
  await robot?.[Symbol.asyncDispose]();
  await cloud?.[Symbol.asyncDispose]();
  endpoint?.closeAllConnections();
  await new Promise((resolve) => (endpoint ? endpoint.close(resolve) : resolve(undefined)));
  await dir?.[Symbol.asyncDispose]();
});

/** The API's answer to one command: always 200 here; `result` as the robot answered. */
async function answer(route: string, command: string, opts: { idempotencyKey?: string } = {}): Promise<Record<string, unknown>> {
  const r = await sendCommand(cloud, robot.robotId, route, opts);
  expect(r.status, `${route}: ${JSON.stringify(r.body)}`).toBe(200);
  expect(r.body.status).toBe('ok');
  expect(r.body.result).toMatchObject({ command, robot_id: robot.robotId, cmd_id: opts.idempotencyKey ?? (expect.stringMatching(/^cmd_/) as string) });
  return r.body.result!;
}

/** The decline of a non-episode command, as the API answers it: 200 with `result.ok` false. */
async function declined(route: string, command: string, code: string, opts: { idempotencyKey?: string } = {}): Promise<string> {
  const result = await answer(route, command, opts);
  expect(result).toEqual({ ok: false, error: { code, message: expect.any(String) as string }, cmd_id: expect.any(String) as string, command, robot_id: robot.robotId });
  return (result.error as { message: string }).message;
}

describe('robot commands answered by configured actions, through /v1', () => {
  test('a program that exits 0 with a JSON object: 200 with its fields as the result; it got the request on stdin and its env', async () => {
    const result = await answer('go-home', 'go_home', { idempotencyKey: 'home-1' });
    expect(result).toEqual({ pose: 'home', speed: 'slow', domain: '7', ok: true, cmd_id: 'home-1', command: 'go_home', robot_id: robot.robotId });
    expect(JSON.parse(await readFile(join(dir.path, 'go-home.stdin'), 'utf8'))).toEqual({ command: 'go_home', args: {}, robot_id: robot.robotId, cmd_id: 'home-1' });
    // A retry with the same key is answered without running the program again.
    expect(await answer('go-home', 'go_home', { idempotencyKey: 'home-1' })).toEqual(result);
    expect(await runsOf('go-home')).toBe(1);
  });

  test('a program that exits 3 with {code, message}: 200 with the decline; a retry gets the same decline and runs nothing', async () => {
    expect(await declined('go-to-start', 'go_to_start', 'invalid_state', { idempotencyKey: 'start-1' })).toBe('the arm is in a protective stop');
    expect(await declined('go-to-start', 'go_to_start', 'invalid_state', { idempotencyKey: 'start-1' })).toBe('the arm is in a protective stop');
    expect(await runsOf('decline')).toBe(1);
  });

  test('a program that exits 1: 200 with the decline failed, saying the exit code and the last line of stderr', async () => {
    const message = await declined('start-autonomous', 'start_autonomous', 'failed');
    expect(message).toContain('exited with code 1: controller not reachable on /dev/ttyUSB0');
  });

  test('a program that hangs: killed at its timeout, 200 with the decline action_timeout', async () => {
    const message = await declined('stop-autonomous', 'stop_autonomous', 'action_timeout');
    expect(message).toContain('did not answer within 3000 ms');
    const pid = Number(await readFile(join(dir.path, 'hang.pid'), 'utf8'));
    await waitFor(
      async () => {
        const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
        // Gone, or a zombie left to a parent that does not reap (PID 1 in a container).
        return stat === null || stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z' ? true : undefined;
      },
      { description: `the hung action (pid ${pid}) to be killed` },
    );
  });

  test('a shell action that prints more than action_output_max_bytes: 200 with the decline failed, naming the bound', async () => {
    expect(await declined('stack/start', 'stack.start', 'failed')).toContain('printed more than 4096 bytes');
  });

  test('with no recorder configured the robot records nothing: no episodes.v1, start answers 422 through /v1 and is refused at the control socket', async () => {
    const r = (await (await cloud.fetch(`/v1/robots/${robot.robotId}`)).json()) as { capabilities: string[]; recording_state: string };
    expect(r.capabilities).not.toContain('episodes.v1');
    expect((await sendCommand(cloud, robot.robotId, 'episodes/start')).status).toBe(422);
    const local = await robot.control(['episode', 'start']);
    expect(local.code).toBe(1);
    expect(local.stderr).toContain('unsupported: no recorder is configured on this robot');
    expect(((await robot.status()) as { recording_state: string }).recording_state).toBe('idle');
  });

  test('a command the config does not map: 200 with the decline not_configured, naming the key', async () => {
    expect(await declined('stack/stop', 'stack.stop', 'not_configured')).toBe(`stack.stop is not configured on this robot (${configFile}: actions.stack.stop)`);
  });

  test('an endpoint: 200 with a JSON object is the result, 409 the decline, 500 a failure', async () => {
    endpointAnswer = [200, '{"stack": "running", "nodes": 12}'];
    expect(await answer('stack/status', 'stack.status', { idempotencyKey: 'status-1' })).toEqual({ stack: 'running', nodes: 12, ok: true, cmd_id: 'status-1', command: 'stack.status', robot_id: robot.robotId });
    expect(endpointBodies.at(-1)).toEqual({ command: 'stack.status', args: {}, robot_id: robot.robotId, cmd_id: 'status-1' });
    endpointAnswer = [409, '{"code": "invalid_state", "message": "the stack is still starting"}'];
    expect(await declined('stack/status', 'stack.status', 'invalid_state')).toBe('the stack is still starting');
    endpointAnswer = [500, 'launch file crashed'];
    expect(await declined('stack/status', 'stack.status', 'failed')).toContain('answered HTTP 500: launch file crashed');
    endpointAnswer = [200, 'running'];
    expect(await declined('stack/status', 'stack.status', 'failed')).toContain('sent non-JSON');
  });

  test('config check names a program that is not there, with the file, line and key', async () => {
    const bad = join(dir.path, 'bad.yaml');
    await writeFile(bad, [`data_dir: ${join(dir.path, 'unused')}`, 'actions:', '  go_home:', `    program: [${join(dir.path, 'no-such-program')}]`, ''].join('\n'));
    const r = await runAgentCli(['config', 'check', bad]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`${bad}:4`);
    expect(r.stderr).toContain('actions.go_home.program');
    expect(r.stderr).toContain('no-such-program does not exist');
  });
});
