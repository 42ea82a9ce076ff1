import { chmod, readFile, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ManualClock } from '@fleet/protocol';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SimulatedRobotActions, type ActionRequest, type RobotActions } from './actions.js';
import {
  ActionsSectionSchema,
  checkActionsConfig,
  configuredRobotActions,
  DECLINE_EXIT_CODE,
  type ActionsSectionInput,
} from './configured-actions.js';
import { RefusalError } from './errors.js';
import { captureLogs, makeTempDir, removeTempDirs, type LogCapture } from './test-support.js';
import { ManualScheduler } from './time.js';

const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
  await removeTempDirs();
});

interface Rig {
  actions: RobotActions;
  scheduler: ManualScheduler;
  logs: LogCapture;
}

/**
 * Configured actions on a manual scheduler: a timeout fires only when the test moves the clock,
 * so every other outcome is the program's or the endpoint's own, however slow the machine.
 */
function rig(section: ActionsSectionInput): Rig {
  const scheduler = new ManualScheduler(new ManualClock());
  const logs = captureLogs();
  const cfg = ActionsSectionSchema.parse(section);
  return { actions: configuredRobotActions(cfg, { logger: logs.logger, env: ENV, scheduler }), scheduler, logs };
}

const request = (command: ActionRequest['command'] = 'go_home', args: Record<string, unknown> = {}): ActionRequest => ({
  command,
  args,
  robot_id: 'rbt_aaaaaaaaaaaaaaaaaaaaaaaaaa',
  cmd_id: 'cmd_test_1',
});

/** An executable sh script in `dir`. */
async function script(dir: string, name: string, body: string): Promise<string> {
  const file = join(dir, name);
  await writeFile(file, `#!/bin/sh\n${body}\n`);
  await chmod(file, 0o755);
  return file;
}

async function refusal(p: Promise<unknown>): Promise<RefusalError> {
  const err = await p.then(
    (v) => new Error(`expected a refusal, got ${JSON.stringify(v)}`),
    (e: unknown) => e,
  );
  if (!(err instanceof RefusalError)) throw err;
  return err;
}

/** Alive means running: a zombie waiting for a parent that never reaps (PID 1 in a container) is dead. */
async function alive(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

describe('a program action', () => {
  it('gets the request as JSON on stdin, its argv and env; exit 0 with a JSON object is the result', async () => {
    const dir = await makeTempDir();
    const prog = await script(dir, 'go-home', `cat > "${dir}/stdin.json"\nprintf '{"pose": "home", "speed": "%s", "domain": "%s"}' "$2" "$ROS_DOMAIN_ID"`);
    const { actions, logs } = rig({ actions: { go_home: { program: [prog, '--speed', 'slow'], env: { ROS_DOMAIN_ID: 7 } } } });
    const req = request('go_home', { note: 'from the API body', nested: { n: 1 } });
    expect(await actions.run(req)).toEqual({ pose: 'home', speed: 'slow', domain: '7' });
    expect(JSON.parse(await readFile(join(dir, 'stdin.json'), 'utf8'))).toEqual(req);
    expect(logs.messages()).toContain('action program answered');
  });

  it('a shell action runs under bash: it can source a setup file and exec the program', async () => {
    const dir = await makeTempDir();
    await writeFile(join(dir, 'setup.bash'), 'export ROBOT_WS=ready\n');
    const { actions } = rig({ actions: { 'stack.status': { shell: `source "${dir}/setup.bash" && exec printf '{"stack": "%s"}' "$ROBOT_WS"` } } });
    expect(await actions.run(request('stack.status'))).toEqual({ stack: 'ready' });
  });

  it(`exit ${DECLINE_EXIT_CODE} with {code, message} is the robot's decline`, async () => {
    const dir = await makeTempDir();
    const prog = await script(dir, 'decline', `cat >/dev/null\necho '{"code": "invalid_state", "message": "the arm is in a protective stop"}'\nexit ${DECLINE_EXIT_CODE}`);
    const { actions } = rig({ actions: { go_home: { program: [prog] } } });
    const err = await refusal(actions.run(request()));
    expect({ code: err.code, message: err.message }).toEqual({ code: 'invalid_state', message: 'the arm is in a protective stop' });
  });

  it(`exit ${DECLINE_EXIT_CODE} without a usable decline is a failure that says so`, async () => {
    const dir = await makeTempDir();
    const unknownCode = await script(dir, 'a', `echo '{"code": "unsupported", "message": "no"}'\nexit ${DECLINE_EXIT_CODE}`);
    const noJson = await script(dir, 'b', `echo 'nope'\nexit ${DECLINE_EXIT_CODE}`);
    const { actions } = rig({ actions: { go_home: { program: [unknownCode] }, go_to_start: { program: [noJson] } } });
    const a = await refusal(actions.run(request('go_home')));
    expect(a.code).toBe('failed');
    expect(a.message).toContain('printed no {"code"');
    const b = await refusal(actions.run(request('go_to_start')));
    expect(b.code).toBe('failed');
    expect(b.message).toMatch(/exited with code 3 \(a decline\) but printed non-JSON/);
  });

  it('another exit code is a failure with the code and the last line of stderr; stderr is logged', async () => {
    const dir = await makeTempDir();
    const prog = await script(dir, 'fail', `echo 'starting' >&2\necho 'servo 3: overcurrent' >&2\necho '{"pose": "home"}'\nexit 1`);
    const { actions, logs } = rig({ actions: { go_home: { program: [prog] } } });
    const err = await refusal(actions.run(request()));
    expect(err.code).toBe('failed');
    expect(err.message).toBe(`go_home: ${prog} exited with code 1: servo 3: overcurrent`);
    expect(logs.records.find((r) => r.msg === 'action program failed')).toMatchObject({ exit_code: 1, stderr: 'starting\nservo 3: overcurrent\n', command: 'go_home', cmd_id: 'cmd_test_1' });
  });

  it('stderr is kept bounded: only its tail is logged', async () => {
    const dir = await makeTempDir();
    const prog = await script(dir, 'noisy', `head -c 100000 /dev/zero | tr '\\0' 'x' >&2\necho >&2\necho 'the last line' >&2\nexit 2`);
    const { actions, logs } = rig({ actions: { go_home: { program: [prog] } } });
    expect((await refusal(actions.run(request()))).message).toMatch(/exited with code 2: the last line$/);
    const logged = String(logs.records.find((r) => r.msg === 'action program failed')?.stderr);
    expect(logged.length).toBeLessThanOrEqual(4096);
    expect(logged.endsWith('the last line\n')).toBe(true);
  });

  it('a program killed by a signal is a failure naming the signal', async () => {
    const dir = await makeTempDir();
    const prog = await script(dir, 'crash', 'kill -SEGV $$');
    const { actions } = rig({ actions: { go_home: { program: [prog] } } });
    const err = await refusal(actions.run(request()));
    expect(err.code).toBe('failed');
    expect(err.message).toContain('was killed by SIGSEGV');
  });

  it('non-JSON, JSON that is not an object, JSON beyond the bounds, and nothing at all are failures with the reason', async () => {
    const dir = await makeTempDir();
    const deep = `${'['.repeat(40)}${']'.repeat(40)}`;
    const cases: [string, RegExp][] = [
      ["echo 'homed ok'", /printed non-JSON/],
      ["echo '[1, 2]'", /printed JSON that is not an object \(an array\)/],
      ["echo '\"home\"'", /printed JSON that is not an object \(a string\)/],
      ["echo 'null'", /printed JSON that is not an object \(null\)/],
      [`echo '{"a": ${deep}}'`, /printed JSON beyond the bounds \(JSON nested deeper than 31 levels\)/],
      ['true', /printed nothing/],
    ];
    for (const [i, [body, expected]] of cases.entries()) {
      const prog = await script(dir, `p${i}`, body);
      const { actions } = rig({ actions: { go_home: { program: [prog] } } });
      const err = await refusal(actions.run(request()));
      expect(err.code, body).toBe('failed');
      expect(err.message, body).toMatch(expected);
    }
  });

  it('stdout beyond action_output_max_bytes is a failure; the program is drained, not blocked, and runs to its end', async () => {
    const dir = await makeTempDir();
    // 1 MiB is far beyond a pipe's buffer: a program left unread would block and time out.
    const prog = await script(dir, 'chatty', `head -c 1048576 /dev/zero | tr '\\0' 'a'\ntouch "${dir}/finished"`);
    const { actions } = rig({ action_output_max_bytes: 2048, actions: { go_home: { program: [prog] } } });
    const err = await refusal(actions.run(request()));
    expect(err.code).toBe('failed');
    expect(err.message).toContain('printed more than 2048 bytes');
    await expect(readFile(join(dir, 'finished'))).resolves.toBeDefined();
  });

  it('a program that does not read its stdin answers as usual', async () => {
    const dir = await makeTempDir();
    const prog = await script(dir, 'deaf', `echo '{"ok": "yes"}'`);
    const { actions } = rig({ actions: { go_home: { program: [prog] } } });
    expect(await actions.run(request('go_home', { big: 'x'.repeat(60_000) }))).toEqual({ ok: 'yes' });
  });

  it('a program that cannot be started is a failure with the reason', async () => {
    const { actions } = rig({ actions: { go_home: { program: ['/nonexistent/go-home'] } } });
    const err = await refusal(actions.run(request()));
    expect(err.code).toBe('failed');
    expect(err.message).toContain('could not be started');
    expect(err.message).toContain('ENOENT');
  });

  it('at its timeout the program and what it started are killed, and the command is declined action_timeout', async () => {
    const dir = await makeTempDir();
    // The program starts a child in its process group and waits for it forever.
    const prog = await script(dir, 'hang', `sleep 1000 &\necho $! > "${dir}/child.pid"\necho $$ > "${dir}/pid"\nwait`);
    const { actions, scheduler, logs } = rig({ action_timeout_ms: 60_000, actions: { go_home: { program: [prog], timeout_ms: 1500 } } });
    const answer = refusal(actions.run(request()));
    const pids = await vi.waitFor(async () => [Number(await readFile(join(dir, 'pid'), 'utf8')), Number(await readFile(join(dir, 'child.pid'), 'utf8'))], { timeout: 10_000 });
    expect(await alive(pids[0]!)).toBe(true);
    scheduler.advance(1499);
    expect(await alive(pids[0]!)).toBe(true);
    scheduler.advance(1);
    const err = await answer;
    expect(err.code).toBe('action_timeout');
    expect(err.message).toContain('go_home did not answer within 1500 ms (agent.yaml: actions.go_home.timeout_ms); the program was killed');
    for (const pid of pids) await vi.waitFor(async () => expect(await alive(pid)).toBe(false), { timeout: 10_000 });
    expect(logs.messages()).toContain('action timed out; killed its process group');
  });

  it('action_timeout_ms applies to an action without its own timeout', async () => {
    const dir = await makeTempDir();
    const prog = await script(dir, 'hang', `echo $$ > "${dir}/pid"\nexec sleep 1000`);
    const { actions, scheduler } = rig({ action_timeout_ms: 700, actions: { go_home: { program: [prog] } } });
    const answer = refusal(actions.run(request()));
    await vi.waitFor(() => readFile(join(dir, 'pid'), 'utf8'), { timeout: 10_000 });
    scheduler.advance(700);
    expect((await answer).code).toBe('action_timeout');
  });
});

describe('a command the config does not map', () => {
  it('is declined not_configured, naming the key to set', async () => {
    const { actions } = rig({ actions: {} });
    const err = await refusal(actions.run(request('stack.start')));
    expect({ code: err.code, message: err.message }).toEqual({ code: 'not_configured', message: 'stack.start is not configured on this robot (agent.yaml: actions.stack.start)' });
  });

  it('with no actions section at all, every command is not configured', async () => {
    const { actions } = rig({});
    expect((await refusal(actions.run(request('go_home')))).code).toBe('not_configured');
  });
});

const servers: Server[] = [];
async function endpoint(handler: (req: IncomingMessage, body: string, res: ServerResponse) => void): Promise<string> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => handler(req, Buffer.concat(chunks).toString('utf8'), res));
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/stack/status`;
}

function answer(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(body);
}

describe('an HTTP action', () => {
  it('is POSTed the request as JSON; 200 with a JSON object is the result', async () => {
    const seen: { method?: string; type?: string; body?: unknown }[] = [];
    const url = await endpoint((req, body, res) => {
      seen.push({ method: req.method, type: req.headers['content-type'], body: JSON.parse(body) });
      answer(res, 200, '{"stack": "running", "nodes": 12}');
    });
    const { actions } = rig({ actions: { 'stack.status': { http: url } } });
    const req = request('stack.status', { verbose: true });
    expect(await actions.run(req)).toEqual({ stack: 'running', nodes: 12 });
    expect(seen).toEqual([{ method: 'POST', type: 'application/json', body: req }]);
  });

  it('409 or 422 with {code, message} is the decline', async () => {
    const url = await endpoint((req, _body, res) => {
      if (req.url?.endsWith('/stack/status')) answer(res, 409, '{"code": "invalid_state", "message": "the stack is starting"}');
    });
    const url422 = await endpoint((_req, _body, res) => answer(res, 422, '{"code": "invalid_args", "message": "speed must be slow or fast"}'));
    const { actions } = rig({ actions: { 'stack.status': { http: url }, go_home: { http: url422 } } });
    const a = await refusal(actions.run(request('stack.status')));
    expect({ code: a.code, message: a.message }).toEqual({ code: 'invalid_state', message: 'the stack is starting' });
    const b = await refusal(actions.run(request('go_home')));
    expect({ code: b.code, message: b.message }).toEqual({ code: 'invalid_args', message: 'speed must be slow or fast' });
  });

  it('another status, non-JSON, a non-object, a decline without its body, and a body beyond the bound are failures with the reason', async () => {
    const cases: [number, string, RegExp][] = [
      [500, 'controller crashed', /answered HTTP 500: controller crashed/],
      [404, '', /answered HTTP 404$/],
      [200, 'ok', /answered HTTP 200 but sent non-JSON/],
      [200, '[1]', /answered HTTP 200 but sent JSON that is not an object \(an array\)/],
      [409, 'busy', /answered HTTP 409 without a \{"code", "message"\} decline/],
      [200, JSON.stringify({ pad: 'x'.repeat(5000) }), /answered more than 2048 bytes/],
    ];
    for (const [status, body, expected] of cases) {
      const url = await endpoint((_req, _body, res) => answer(res, status, body));
      const { actions } = rig({ action_output_max_bytes: 2048, actions: { 'stack.status': { http: url } } });
      const err = await refusal(actions.run(request('stack.status')));
      expect(err.code, `${status} ${body.slice(0, 20)}`).toBe('failed');
      expect(err.message, `${status} ${body.slice(0, 20)}`).toMatch(expected);
    }
  });

  it('a body without a content-length is read only up to the bound: an endless one is cut off', async () => {
    const url = await endpoint((_req, _body, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      // Chunked and never ending: an agent that read it whole would wait forever.
      const pump = () => {
        while (!res.destroyed && res.write('x'.repeat(1000)));
        if (!res.destroyed) res.once('drain', pump);
      };
      pump();
    });
    const { actions } = rig({ action_output_max_bytes: 2048, actions: { 'stack.status': { http: url } } });
    expect((await refusal(actions.run(request('stack.status')))).message).toMatch(/answered more than 2048 bytes/);
  });

  it('a refused connection is a failure with the reason', async () => {
    const url = await endpoint(() => {});
    const server = servers.pop()!;
    await new Promise((resolve) => server.close(resolve));
    const { actions } = rig({ actions: { 'stack.status': { http: url } } });
    const err = await refusal(actions.run(request('stack.status')));
    expect(err.code).toBe('failed');
    expect(err.message).toContain('could not be reached: ECONNREFUSED');
  });

  it('an endpoint that does not answer within timeout_ms is aborted and declined action_timeout', async () => {
    let received = 0;
    const url = await endpoint(() => {
      received += 1; // and never answers
    });
    const { actions, scheduler } = rig({ actions: { 'stack.status': { http: url, timeout_ms: 3000 } } });
    const pending = refusal(actions.run(request('stack.status')));
    await vi.waitFor(() => expect(received).toBe(1), { timeout: 10_000 });
    scheduler.advance(3000);
    const err = await pending;
    expect(err.code).toBe('action_timeout');
    expect(err.message).toContain('stack.status did not answer within 3000 ms');
  });
});

describe('the actions config', () => {
  const issues = (input: unknown) => {
    const r = ActionsSectionSchema.safeParse(input);
    return r.success ? [] : r.error.issues.map((i) => ({ path: i.path, message: i.message }));
  };

  it('has documented defaults', () => {
    expect(ActionsSectionSchema.parse({})).toEqual({ action_timeout_ms: 8000, action_output_max_bytes: 65536, actions: {} });
    expect(ActionsSectionSchema.parse({ actions: 'simulated' }).actions).toBe('simulated');
  });

  it('refuses an unknown command, naming it', () => {
    expect(issues({ actions: { go_hom: { program: ['/bin/true'] }, 'stack.restart': { program: ['/bin/true'] } } })).toEqual([
      { path: ['actions', 'go_hom'], message: 'unknown command "go_hom" (one of go_home, go_to_start, start_autonomous, stop_autonomous, stack.start, stack.stop, stack.status)' },
      { path: ['actions', 'stack.restart'], message: expect.stringMatching(/^unknown command "stack.restart"/) as string },
    ]);
  });

  it('names the key of a mistake inside an action', () => {
    expect(issues({ actions: { go_home: { program: '/bin/true' } } })).toMatchObject([{ path: ['actions', 'go_home', 'program'] }]);
    expect(issues({ actions: { go_home: { program: ['/bin/true'], timeout_ms: 'soon' } } })).toMatchObject([{ path: ['actions', 'go_home', 'timeout_ms'] }]);
    expect(issues({ actions: { go_home: { program: ['/bin/true'], shell: 'true' } } })).toMatchObject([{ path: ['actions', 'go_home'], message: 'an action has one of program, shell or http, not program and shell' }]);
    expect(issues({ actions: { go_home: {} } })).toMatchObject([{ path: ['actions', 'go_home'], message: 'an action needs one of program, shell or http' }]);
    expect(issues({ actions: { go_home: { program: ['/bin/true'], colour: 'red' } } })).toMatchObject([{ path: ['actions', 'go_home'] }]);
    expect(issues({ actions: { go_home: { http: 'http://127.0.0.1:1/x', env: { A: '1' } } } })).toMatchObject([{ path: ['actions', 'go_home', 'env'] }]);
    expect(issues({ actions: 'simulation' })).toMatchObject([{ path: ['actions'] }]);
    expect(issues({ action_timeout_ms: 0 })).toMatchObject([{ path: ['action_timeout_ms'] }]);
  });

  it('takes only robot-local http(s) endpoints', () => {
    for (const ok of ['http://127.0.0.1:8765/stack/status', 'https://localhost/x', 'http://[::1]:80/', 'http://192.168.1.20/', 'http://10.1.2.3/', 'http://169.254.1.1/']) {
      expect(issues({ actions: { go_home: { http: ok } } }), ok).toEqual([]);
    }
    for (const bad of ['http://example.com/x', 'http://8.8.8.8/', 'ftp://127.0.0.1/', 'http://user:pw@127.0.0.1/', 'not a url', 'http://robot.local/']) {
      expect(issues({ actions: { go_home: { http: bad } } }), bad).toMatchObject([{ path: ['actions', 'go_home', 'http'] }]);
    }
  });

  it('actions: simulated is the in-agent simulated robot', async () => {
    const actions = configuredRobotActions(ActionsSectionSchema.parse({ actions: 'simulated' }), { logger: captureLogs().logger, env: ENV, scheduler: new ManualScheduler(new ManualClock()) });
    expect(actions).toBeInstanceOf(SimulatedRobotActions);
    expect(await actions.run(request('go_home'))).toEqual({ pose: 'home' });
  });
});

describe('checkActionsConfig', () => {
  it('reports a program that is missing, not executable, relative or not on PATH, and nothing for one that is there', async () => {
    const dir = await makeTempDir();
    const good = await script(dir, 'good', 'true');
    await writeFile(join(dir, 'plain'), 'not a program');
    const cfg = ActionsSectionSchema.parse({
      actions: {
        go_home: { program: [good] },
        go_to_start: { program: [join(dir, 'missing')] },
        start_autonomous: { program: [join(dir, 'plain')] },
        stop_autonomous: { program: ['bin/relative'] },
        'stack.start': { program: ['fleet-no-such-program'] },
        'stack.stop': { program: ['good'], env: { PATH: dir } },
        'stack.status': { shell: 'true' },
      },
    });
    expect(checkActionsConfig(cfg, ENV)).toEqual([
      { path: ['actions', 'go_to_start', 'program', 0], message: `${join(dir, 'missing')} does not exist` },
      { path: ['actions', 'start_autonomous', 'program', 0], message: `${join(dir, 'plain')} is not executable` },
      { path: ['actions', 'stop_autonomous', 'program', 0], message: "bin/relative is a relative path; give the program's absolute path or a name on PATH" },
      { path: ['actions', 'stack.start', 'program', 0], message: `fleet-no-such-program is not on PATH (${ENV.PATH})` },
    ]);
    expect(checkActionsConfig(cfg, { PATH: '/nonexistent' })).toContainEqual({ path: ['actions', 'stack.status', 'shell'], message: 'a shell action runs under bash: bash is not on PATH (/nonexistent)' });
    expect(checkActionsConfig(ActionsSectionSchema.parse({ actions: 'simulated' }), ENV)).toEqual([]);
  });
});
