/**
 * How one configured action runs: a program (or a shell command) as a child process, or a POST
 * to a robot-local endpoint, each outcome turned into a result or a RefusalError. The config and
 * the choice of runner are configured-actions.ts.
 */
import { spawn } from 'node:child_process';
import { JSON_LIMITS, parseBoundedJson, type CommandRefusal } from '@fleet/protocol';
import type { Logger } from 'pino';
import { request as httpRequest } from 'undici';
import type { ActionRequest } from './actions.js';
import { RefusalError } from './errors.js';
import type { Scheduler } from './time.js';

/**
 * The exit code with which a program declines a command: its stdout then holds
 * `{"code": "invalid_state" | "invalid_args" | "failed", "message": "…"}`. 0 is a result; every
 * other code is a failure. 3 because 1 and 2 are what shells and most tools exit with on any
 * error, and 126/127 are the shell's "not executable" / "not found".
 */
export const DECLINE_EXIT_CODE = 3;

/** The codes a program or an endpoint may decline with (the protocol's other refusals are the agent's own). */
export const DECLINE_CODES = ['invalid_state', 'invalid_args', 'failed'] as const satisfies readonly CommandRefusal[];

/** The HTTP statuses with which an endpoint declines a command, with the same `{code, message}` body. */
export const DECLINE_STATUSES: ReadonlySet<number> = new Set([409, 422]);

/** Most bytes of stderr kept per run (its tail), for the log and the failure's reason. */
const STDERR_TAIL_BYTES = 4 * 1024;

/**
 * The result is put one level down in the reply the cloud parses within JSON_LIMITS, so it may
 * nest one level less; deeper would be dropped by the cloud as malformed and the caller would
 * wait for a 504.
 */
const RESULT_LIMITS = { ...JSON_LIMITS, maxDepth: JSON_LIMITS.maxDepth - 1 };

type Env = Readonly<Record<string, string | undefined>>;

/** One run of an action: what it answers, its bounds, and where it logs. */
export interface ActionRun {
  request: ActionRequest;
  timeoutMs: number;
  maxBytes: number;
  timeoutKey: string;
  logger: Logger;
  scheduler: Scheduler;
}

function timedOut(run: ActionRun, what: string): RefusalError {
  return new RefusalError(
    'action_timeout',
    `${run.request.command} did not answer within ${run.timeoutMs} ms (${run.timeoutKey}); ${what}. Whether it acted is unknown: check the robot before sending it again`,
  );
}

function failed(run: ActionRun, who: string, why: string): RefusalError {
  return new RefusalError('failed', `${run.request.command}: ${who} ${why}`);
}

/** The JSON object an action answered, or why it is not one (`verb`: what a program or an endpoint did). */
function parseObject(text: string, verb: 'printed' | 'sent'): { ok: true; value: Record<string, unknown> } | { ok: false; why: string } {
  if (text.trim() === '') return { ok: false, why: `${verb} nothing (an action answers a JSON object, {} at least)` };
  const parsed = parseBoundedJson(text, RESULT_LIMITS);
  if (!parsed.ok) return { ok: false, why: parsed.reason === 'invalid_json' ? `${verb} non-JSON (${parsed.message})` : `${verb} JSON beyond the bounds (${parsed.message})` };
  const v = parsed.value;
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return { ok: false, why: `${verb} JSON that is not an object (${v === null ? 'null' : Array.isArray(v) ? 'an array' : `a ${typeof v}`})` };
  return { ok: true, value: v as Record<string, unknown> };
}

/** `{code, message}` of a decline, or null when the object is not one. */
function declineOf(value: Record<string, unknown>): { code: (typeof DECLINE_CODES)[number]; message: string } | null {
  const { code, message } = value;
  if (typeof code !== 'string' || !(DECLINE_CODES as readonly string[]).includes(code) || typeof message !== 'string') return null;
  return { code: code as (typeof DECLINE_CODES)[number], message };
}

function lastLine(text: string): string {
  const lines = text.split('\n').map((l) => l.trim()).filter((l) => l !== '');
  return (lines[lines.length - 1] ?? '').slice(0, 300);
}

/**
 * One run of a program: the request as JSON on stdin; exit 0 with a JSON object is the result,
 * exit DECLINE_EXIT_CODE with `{code, message}` a decline, anything else a failure. It runs in a
 * process group of its own, so the timeout's SIGKILL also reaches what it started (`ros2 action
 * send_goal` under a shell). Output beyond the bound is read and dropped, not left in the pipe,
 * so the program is not blocked and finishes what it was doing.
 */
export function runProgram(run: ActionRun, file: string, args: string[], env: Env, who: string): Promise<Record<string, unknown>> {
  const { request, logger } = run;
  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (outcome: { result: Record<string, unknown> } | { error: Error }) => {
      if (settled) return;
      settled = true;
      run.scheduler.clearTimeout(timer);
      if ('result' in outcome) resolve(outcome.result);
      else reject(outcome.error);
    };
    const child = spawn(file, args, { detached: true, stdio: ['pipe', 'pipe', 'pipe'], env });
    const stdout: Buffer[] = [];
    let stdoutBytes = 0;
    let stderrTail = Buffer.alloc(0);
    child.stdout.on('data', (chunk: Buffer) => {
      stdoutBytes += chunk.length;
      if (stdoutBytes <= run.maxBytes) stdout.push(chunk);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderrTail = Buffer.concat([stderrTail, chunk]);
      if (stderrTail.length > STDERR_TAIL_BYTES) stderrTail = stderrTail.subarray(stderrTail.length - STDERR_TAIL_BYTES);
    });
    // A program that does not read its stdin closes the pipe: EPIPE is not its failure.
    child.stdin.on('error', () => {});
    child.stdin.end(JSON.stringify(request));
    const timer = run.scheduler.setTimeout(() => {
      if (child.pid !== undefined) {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // Already gone between the timer and the kill.
        }
      }
      logger.warn({ timeout_ms: run.timeoutMs, pid: child.pid, stderr: stderrTail.toString('utf8') }, 'action timed out; killed its process group');
      settle({ error: timedOut(run, 'the program was killed') });
    }, run.timeoutMs);
    child.on('error', (err) => {
      logger.warn({ err: { message: err.message } }, 'action program could not be started');
      settle({ error: failed(run, who, `could not be started: ${err.message}`) });
    });
    child.on('close', (code, signal) => {
      const stderr = stderrTail.toString('utf8');
      const why = stderr.trim() ? `: ${lastLine(stderr)}` : '';
      const log = { exit_code: code, signal, stdout_bytes: stdoutBytes, ...(stderr ? { stderr } : {}) };
      if (settled) return;
      if (signal !== null) {
        logger.warn(log, 'action program killed by a signal');
        return settle({ error: failed(run, who, `was killed by ${signal}${why}`) });
      }
      if (code !== 0 && code !== DECLINE_EXIT_CODE) {
        logger.warn(log, 'action program failed');
        return settle({ error: failed(run, who, `exited with code ${code}${why}`) });
      }
      if (stdoutBytes > run.maxBytes) {
        logger.warn(log, 'action program printed more than the output bound');
        return settle({ error: failed(run, who, `printed more than ${run.maxBytes} bytes (action_output_max_bytes)`) });
      }
      const parsed = parseObject(Buffer.concat(stdout).toString('utf8'), 'printed');
      if (!parsed.ok) {
        logger.warn(log, 'action program answered no JSON object');
        return settle({ error: failed(run, who, `${code === DECLINE_EXIT_CODE ? `exited with code ${code} (a decline) but ` : ''}${parsed.why}`) });
      }
      if (code === DECLINE_EXIT_CODE) {
        const decline = declineOf(parsed.value);
        if (!decline) {
          logger.warn(log, 'action program exited with the decline code but printed no decline');
          return settle({ error: failed(run, who, `exited with code ${code} (a decline) but printed no {"code": ${DECLINE_CODES.map((c) => `"${c}"`).join(' | ')}, "message": "…"}`) });
        }
        logger.info({ ...log, code: decline.code }, 'action program declined');
        return settle({ error: new RefusalError(decline.code, decline.message) });
      }
      logger.info(log, 'action program answered');
      settle({ result: parsed.value });
    });
  });
}

/**
 * One call of an endpoint: the request POSTed as JSON; 200 with a JSON object is the result, 409
 * or 422 with `{code, message}` a decline, anything else a failure. The timeout covers the whole
 * exchange (connect, headers, body); redirects are not followed (undici's request never does).
 */
export async function callEndpoint(run: ActionRun, url: string): Promise<Record<string, unknown>> {
  const { request, logger } = run;
  const abort = new AbortController();
  let timedOutAt = false;
  const timer = run.scheduler.setTimeout(() => {
    timedOutAt = true;
    abort.abort();
  }, run.timeoutMs);
  const who = url;
  try {
    let status: number;
    let text: string;
    try {
      const res = await httpRequest(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify(request),
        signal: abort.signal,
      });
      status = res.statusCode;
      const declared = Number(res.headers['content-length']);
      const chunks: Buffer[] = [];
      let bytes = Number.isFinite(declared) ? declared : 0;
      if (bytes <= run.maxBytes) {
        bytes = 0;
        for await (const chunk of res.body as AsyncIterable<Buffer>) {
          bytes += chunk.length;
          if (bytes > run.maxBytes) break;
          chunks.push(chunk);
        }
      }
      if (bytes > run.maxBytes) {
        res.body.destroy();
        logger.warn({ status, url }, 'action endpoint answered more than the output bound');
        throw failed(run, who, `answered more than ${run.maxBytes} bytes (action_output_max_bytes)`);
      }
      text = Buffer.concat(chunks).toString('utf8');
    } catch (err) {
      if (err instanceof RefusalError) throw err;
      if (timedOutAt) {
        logger.warn({ timeout_ms: run.timeoutMs, url }, 'action endpoint timed out; the request was aborted');
        throw timedOut(run, 'the request was aborted');
      }
      const e = err as Error & { code?: string; cause?: { code?: string; message?: string } };
      const reason = e.cause?.code ?? e.code ?? e.message;
      logger.warn({ url, err: { message: e.message, code: reason } }, 'action endpoint unreachable');
      throw failed(run, who, `could not be reached: ${reason}${e.message && e.message !== reason ? ` (${e.message})` : ''}`);
    }
    const parsed = parseObject(text, 'sent');
    if (status === 200 && parsed.ok) {
      logger.info({ status, url }, 'action endpoint answered');
      return parsed.value;
    }
    if (DECLINE_STATUSES.has(status) && parsed.ok) {
      const decline = declineOf(parsed.value);
      if (decline) {
        logger.info({ status, url, code: decline.code }, 'action endpoint declined');
        throw new RefusalError(decline.code, decline.message);
      }
    }
    logger.warn({ status, url, body: text.slice(0, 1024) }, 'action endpoint failed');
    if (status === 200 && !parsed.ok) throw failed(run, who, `answered HTTP 200 but ${parsed.why}`);
    if (DECLINE_STATUSES.has(status)) throw failed(run, who, `answered HTTP ${status} without a {"code", "message"} decline`);
    throw failed(run, who, `answered HTTP ${status}${text.trim() ? `: ${lastLine(text).slice(0, 200)}` : ''}`);
  } finally {
    run.scheduler.clearTimeout(timer);
  }
}
