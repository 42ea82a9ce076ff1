import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { newId, newSecret } from './ids.js';
import { ManualClock, ManualScheduler } from '@fleet/protocol';
import { parseCloudConfig } from './config.js';
import { createLogger, lazyChildLoggerFactory, redactUrl, scrubSecrets } from './logger.js';
import { openTestStore } from './store/test-store.js';
import { buildTestApp } from './test-support.js';

const SECRETS = ['ak', 'whsec', 'dsec', 'rsec', 'ret'].map((p) => newSecret(p));

describe('redactUrl', () => {
  it.each([
    ['/v1/robots?api_key=SECRET&limit=5', '/v1/robots?api_key=[redacted]&limit=5'],
    ['/v1/robots?limit=5&access_token=abc', '/v1/robots?limit=5&access_token=[redacted]'],
    ['/x?Password=hunter2&X-Amz-Signature=ff', '/x?Password=[redacted]&X-Amz-Signature=[redacted]'],
    ['/x?secret=1&client_secret=2&auth=3', '/x?secret=[redacted]&client_secret=[redacted]&auth=[redacted]'],
    ['/v1/episodes?cursor=abc&limit=10', '/v1/episodes?cursor=abc&limit=10'],
  ])('%s', (url, expected) => {
    expect(redactUrl(url)).toBe(expected);
  });

  it('drops any query value that starts like one of our secrets, whatever its name, encoded or not', () => {
    for (const s of SECRETS) {
      expect(redactUrl(`/v1/x?q=${s}`)).toBe('/v1/x?q=[redacted]');
      expect(redactUrl(`/v1/x?q=${encodeURIComponent(s).replace('_', '%5F')}`)).toBe('/v1/x?q=[redacted]');
      expect(redactUrl(`/v1/x?${s}`)).toBe('/v1/x?[redacted]');
      expect(redactUrl(`/v1/x/${s}/y`)).not.toContain(s);
    }
  });

  it('keeps ids, which share prefixes with secrets but are not secret', () => {
    const id = newId('ret');
    expect(redactUrl(`/v1/robots/enrollment-tokens/${id}`)).toBe(`/v1/robots/enrollment-tokens/${id}`);
    expect(scrubSecrets(`token ${id} revoked`)).toBe(`token ${id} revoked`);
  });
});

describe('createLogger', () => {
  it('never writes a secret: request URL, Authorization header, fields named like secrets, messages, errors', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const log = createLogger('trace', sink);
    const [ak, whsec, dsec, rsec, ret] = SECRETS as [string, string, string, string, string];
    log.info({ req: { method: 'GET', url: `/v1/robots?api_key=${ak}`, headers: { authorization: `Bearer ${ak}` } } }, 'incoming request');
    log.info({ headers: { authorization: `Bearer ${ak}` } }, 'h');
    log.info({ webhook: { secret: whsec }, robot: { password: rsec }, token: ret }, 'fields');
    log.warn(`message mentioning ${dsec} and ${ret}`);
    log.error({ err: new Error(`failed with ${whsec}`) }, 'error');
    const text = lines.join('');
    expect(lines).toHaveLength(5);
    for (const s of SECRETS) expect(text).not.toContain(s);
    expect(text).toContain('api_key=[redacted]');
  });
});

describe('lazyChildLoggerFactory (request loggers)', () => {
  const capture = () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    return { lines, sink };
  };
  const withoutTime = (line: string) => line.replace(/"time":\d+,/, '');

  it('builds the child only when something is logged at an enabled level, and writes what the child writes', () => {
    const { lines, sink } = capture();
    const log = createLogger('warn', sink);
    const lazy = lazyChildLoggerFactory.call({} as never, log, { reqId: 'req_1' }, {}, {} as never) as unknown as { built: boolean } & typeof log;
    lazy.info({ req: { method: 'GET', url: '/v1/x' } }, 'incoming request');
    lazy.debug('nothing');
    expect(lazy.built).toBe(false);
    expect(lines).toHaveLength(0);
    expect(lazy.level).toBe('warn');
    lazy.warn({ token: 'ret_x', n: 1 }, `slow with ${SECRETS[0]}`);
    expect(lazy.built).toBe(true);
    log.child({ reqId: 'req_1' }).warn({ token: 'ret_x', n: 1 }, `slow with ${SECRETS[0]}`);
    expect(lines).toHaveLength(2);
    expect(withoutTime(lines[0]!)).toBe(withoutTime(lines[1]!));
    expect(lines[0]).toContain('"reqId":"req_1"');
    expect(lines[0]).not.toContain(SECRETS[0]);
  });

  it('logs Fastify\'s request lines with the request id when info is enabled', async () => {
    const { lines, sink } = capture();
    const store = await openTestStore();
    const clock = new ManualClock();
    const cloud = await buildTestApp(parseCloudConfig({}), { store, clock, scheduler: new ManualScheduler(clock) }, { logger: createLogger('info', sink) });
    const { app } = cloud;
    try {
      const res = await app.inject({ method: 'GET', url: '/healthz' });
      expect(res.statusCode).toBe(200);
      const logged = lines.map((l) => JSON.parse(l) as { reqId?: string; msg?: string });
      const id = res.headers['x-request-id'];
      expect(id).toBeTruthy();
      expect(logged.filter((l) => l.msg === 'incoming request' || l.msg === 'request completed').map((l) => l.reqId)).toEqual([id, id]);
    } finally {
      await cloud.close();
      await store.close();
    }
  });
});
