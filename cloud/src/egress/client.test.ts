import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, ManualScheduler, systemScheduler } from '@fleet/protocol';
import { EgressClient, EgressError, readJsonAnswer, type EgressFailure, type ResolvedAddress, type Resolver } from './client.js';
import { createTestPki, startHttpsReceiver, type TestPki, type TestReceiver } from './test-https.js';

let pki: TestPki;
let receiver: TestReceiver;
let otherNameReceiver: TestReceiver;
const clients: EgressClient[] = [];

const v4 = (address: string): ResolvedAddress => ({ address, family: 4 });

/** A resolver from a fixed table; records every name it is asked for. */
function tableResolver(table: Record<string, readonly string[]>) {
  const calls: string[] = [];
  const resolve: Resolver = async (hostname) => {
    calls.push(hostname);
    const addresses = table[hostname];
    if (addresses === undefined) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return { resolve, calls };
}

/** A client on the system's timers (the receivers here are real), unless a test gives it a manual scheduler. */
function client(opts: Partial<ConstructorParameters<typeof EgressClient>[0]> = {}): EgressClient {
  const c = new EgressClient({ ca: pki.caPem, scheduler: systemScheduler, ...opts });
  clients.push(c);
  return c;
}

/** A client that may reach the loopback receiver, `localhost` resolving to 127.0.0.1. */
function loopbackClient(): EgressClient {
  return client({ allowLoopback: true, resolve: tableResolver({ localhost: ['127.0.0.1'] }).resolve });
}

async function failureOf(promise: Promise<unknown>): Promise<{ failure: EgressFailure; error: EgressError }> {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(EgressError);
    const error = err as EgressError;
    return { failure: error.failure, error };
  }
  throw new Error('expected the request to fail');
}

beforeAll(async () => {
  pki = createTestPki();
  const serverTls = pki.issue(['localhost', 'api.fleet.test'], ['127.0.0.1']);
  receiver = await startHttpsReceiver(serverTls, (req, res, ctx) => {
    switch (req.url) {
      case '/ok':
        res.writeHead(200, { 'content-type': 'application/json', 'x-receiver': 'yes' });
        res.end(JSON.stringify({ received: req.body }));
        return;
      case '/redirect':
        res.writeHead(302, { location: `${receiver.origin()}/target` });
        res.end('moved');
        return;
      case '/huge': {
        const body = Buffer.alloc(2 * 1024 * 1024, 'x');
        res.writeHead(200, { 'content-length': body.length });
        res.end(body);
        return;
      }
      case '/stream': {
        // No content-length: chunks forever until the client goes away.
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        const chunk = Buffer.alloc(16 * 1024, 'y');
        const pump = () => {
          while (!res.destroyed && res.write(chunk));
          if (!res.destroyed) res.once('drain', pump);
        };
        pump();
        return;
      }
      case '/deep':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`{"grant_id":"g","x":${'['.repeat(5000)}${']'.repeat(5000)}}`);
        return;
      case '/exact':
        res.writeHead(200);
        res.end(Buffer.alloc(1000, 'z'));
        return;
      case '/hang':
        return; // never answers
      case '/trickle':
        // Answers the headers and a first chunk of the body, then never finishes it.
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.write('a first chunk');
        return;
      case '/reset':
        ctx.reset();
        return;
      default:
        res.writeHead(404);
        res.end();
    }
  });
  otherNameReceiver = await startHttpsReceiver(pki.issue(['other.example']), (_req, res) => {
    res.writeHead(200);
    res.end('should not be read');
  });
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

afterAll(async () => {
  await receiver?.close();
  await otherNameReceiver?.close();
  pki?.cleanup();
});

describe('EgressClient against a real HTTPS receiver', () => {
  it('POSTs the body and headers and returns the answer', async () => {
    const res = await loopbackClient().post(`${receiver.origin()}/ok`, {
      headers: { 'content-type': 'application/json', 'x-service-event': 'episode.finalized' },
      body: '{"hello":"world"}',
    });
    expect(res.status).toBe(200);
    expect(res.headers['x-receiver']).toBe('yes');
    expect(JSON.parse(res.body.toString('utf8'))).toEqual({ received: '{"hello":"world"}' });
    expect(res.address).toBe('127.0.0.1');
    expect(res.durationMs).toBeGreaterThanOrEqual(0);
    const got = receiver.requests.at(-1)!;
    expect(got.method).toBe('POST');
    expect(got.headers['x-service-event']).toBe('episode.finalized');
    expect(got.headers.host).toBe(`localhost:${receiver.port}`);
    expect(got.servername).toBe('localhost');
  });

  it('reads a JSON answer within the bounds, and refuses one nested beyond them or not JSON', async () => {
    const client = loopbackClient();
    const ok = readJsonAnswer(await client.post(`${receiver.origin()}/ok`, { body: '{"a":[1]}' }));
    expect(ok).toEqual({ ok: true, value: { received: '{"a":[1]}' } });
    const deep = readJsonAnswer(await client.post(`${receiver.origin()}/deep`, { body: '' }));
    expect(deep).toMatchObject({ ok: false, reason: 'bounds', violation: { limit: 'depth', path: '/x/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0' } });
    const text = readJsonAnswer(await client.post(`${receiver.origin()}/exact`, { body: '' }));
    expect(text).toMatchObject({ ok: false, reason: 'invalid_json' });
  });

  it('accepts a body exactly at the cap', async () => {
    const res = await loopbackClient().post(`${receiver.origin()}/exact`, { maxResponseBytes: 1000 });
    expect(res.body.length).toBe(1000);
  });

  it('returns a 3xx as a response and never follows it', async () => {
    const before = receiver.requests.length;
    const res = await loopbackClient().post(`${receiver.origin()}/redirect`, { body: 'x' });
    expect(res.status).toBe(302);
    expect(res.headers.location).toBe(`${receiver.origin()}/target`);
    expect(res.body.toString()).toBe('moved');
    const paths = receiver.requests.slice(before).map((r) => r.url);
    expect(paths).toEqual(['/redirect']);
  });

  it('refuses a body larger than the cap (declared length)', async () => {
    const { failure } = await failureOf(loopbackClient().post(`${receiver.origin()}/huge`, { maxResponseBytes: 64 * 1024 }));
    expect(failure).toBe('too_large');
  });

  it('aborts an endless body past the cap (no declared length)', async () => {
    const { failure } = await failureOf(loopbackClient().post(`${receiver.origin()}/stream`, { maxResponseBytes: 100 * 1024 }));
    expect(failure).toBe('too_large');
  });

  it('with discardBody returns the status and headers of an answer whose body it read past, and keeps connections as a read does', async () => {
    const ok = await loopbackClient().post(`${receiver.origin()}/ok`, { body: '{"a":1}', discardBody: true });
    expect(ok.status).toBe(200);
    expect(ok.headers['x-receiver']).toBe('yes');
    expect(ok.body.length).toBe(0);
    const connectionsFor = async (discardBody: boolean): Promise<number> => {
      const c = loopbackClient();
      const before = receiver.connections();
      for (let i = 0; i < 6; i++) expect((await c.post(`${receiver.origin()}/ok`, { body: `{"i":${i}}`, discardBody })).status).toBe(200);
      return receiver.connections() - before;
    };
    const discarding = await connectionsFor(true);
    expect(discarding).toBeLessThan(6);
    expect(discarding).toBe(await connectionsFor(false));
  });

  it('with discardBody still refuses a declared body past the cap, with its status, and cuts off an endless one', async () => {
    const { failure, error } = await failureOf(loopbackClient().post(`${receiver.origin()}/huge`, { maxResponseBytes: 64 * 1024, discardBody: true }));
    expect(failure).toBe('too_large');
    expect(error.details.status).toBe(200);
    const endless = await loopbackClient().post(`${receiver.origin()}/stream`, { maxResponseBytes: 100 * 1024, discardBody: true, timeoutMs: 5000 });
    expect(endless.status).toBe(200);
    expect(endless.body.length).toBe(0);
  });

  it('times out on a receiver that never answers', async () => {
    const { failure } = await failureOf(loopbackClient().post(`${receiver.origin()}/hang`, { timeoutMs: 300 }));
    expect(failure).toBe('timeout');
  });

  it("times out when the injected scheduler's deadline passes, not before", async () => {
    const scheduler = new ManualScheduler(new ManualClock(0));
    const hang = client({ allowLoopback: true, resolve: tableResolver({ localhost: ['127.0.0.1'] }).resolve, scheduler });
    const before = receiver.requests.filter((r) => r.url === '/hang').length;
    let settled = false;
    const outcome = failureOf(hang.post(`${receiver.origin()}/hang`, { timeoutMs: 60_000 })).finally(() => (settled = true));
    await expect.poll(() => receiver.requests.filter((r) => r.url === '/hang').length).toBe(before + 1);
    scheduler.advance(59_999);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(settled).toBe(false);
    scheduler.advance(1);
    expect((await outcome).failure).toBe('timeout');
  });

  it('times out when the deadline passes while the body is still coming, read or discarded', async () => {
    for (const discardBody of [false, true]) {
      const scheduler = new ManualScheduler(new ManualClock(0));
      const slow = client({ allowLoopback: true, resolve: tableResolver({ localhost: ['127.0.0.1'] }).resolve, scheduler });
      const before = receiver.requests.filter((r) => r.url === '/trickle').length;
      let settled = false;
      const outcome = failureOf(slow.post(`${receiver.origin()}/trickle`, { timeoutMs: 60_000, discardBody })).finally(() => (settled = true));
      await expect.poll(() => receiver.requests.filter((r) => r.url === '/trickle').length).toBe(before + 1);
      // Long enough for the headers and the first chunk to arrive: the body has begun.
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(settled).toBe(false);
      scheduler.advance(60_000);
      expect((await outcome).failure, `discardBody ${discardBody}`).toBe('timeout');
    }
  });

  it('reports a connection reset as unreachable', async () => {
    const { failure } = await failureOf(loopbackClient().post(`${receiver.origin()}/reset`, { body: 'x' }));
    expect(failure).toBe('unreachable');
  });

  it('reports a refused connection as unreachable', async () => {
    const server = createNetServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const { failure } = await failureOf(loopbackClient().post(`https://localhost:${port}/ok`));
    expect(failure).toBe('unreachable');
  });

  it('keeps verifying TLS against the host name: a certificate for another name fails', async () => {
    const { failure, error } = await failureOf(loopbackClient().post(`${otherNameReceiver.origin()}/ok`));
    expect(failure).toBe('tls');
    expect(error.message).toMatch(/altname|hostname|does not match/i);
    expect(otherNameReceiver.requests).toHaveLength(0);
  });

  it('fails TLS when the CA is not trusted', async () => {
    const untrusting = new EgressClient({ allowLoopback: true, scheduler: systemScheduler, resolve: tableResolver({ localhost: ['127.0.0.1'] }).resolve });
    clients.push(untrusting);
    const { failure } = await failureOf(untrusting.post(`${receiver.origin()}/ok`));
    expect(failure).toBe('tls');
  });
});

describe('URL rules', () => {
  it.each([
    ['http://localhost/hook'],
    ['ftp://example.com/'],
    ['https://user:secret@example.com/'],
    ['https://user@example.com/'],
    ['not a url'],
    ['https://0x1ffffffff/'],
  ])('refuses %s as invalid_url without resolving it', async (url) => {
    const { resolve, calls } = tableResolver({ localhost: ['127.0.0.1'], 'example.com': ['93.184.216.34'] });
    const { failure } = await failureOf(client({ allowLoopback: true, resolve }).post(url));
    expect(failure).toBe('invalid_url');
    expect(calls).toEqual([]);
  });

  it('refuses an http:// URL to the running receiver without connecting', async () => {
    const before = receiver.connections();
    const { failure } = await failureOf(loopbackClient().post(`http://127.0.0.1:${receiver.port}/ok`));
    expect(failure).toBe('invalid_url');
    expect(receiver.connections()).toBe(before);
  });
});

describe('address checks', () => {
  it.each([
    [['10.0.0.1'], 'private'],
    [['8.8.8.8', '10.0.0.1'], 'private'],
    [['2606:4700:4700::1111', 'fd00:ec2::254'], 'metadata'],
    [['169.254.169.254'], 'metadata'],
    [['::ffff:7f00:1'], 'loopback'],
    [['64:ff9b::a00:1'], 'private'],
  ] as const)('refuses a host resolving to %j (%s) before any connection', async (addresses, reason) => {
    const { resolve } = tableResolver({ 'hooks.example.com': addresses });
    const { failure, error } = await failureOf(client({ resolve }).post('https://hooks.example.com/hook'));
    expect(failure).toBe('forbidden_address');
    expect(error.details.reason).toBe(reason);
  });

  it('refuses a host resolving to the loopback receiver AND a private address, without connecting', async () => {
    const before = receiver.connections();
    const { resolve } = tableResolver({ localhost: ['127.0.0.1', '10.0.0.1'] });
    const { failure, error } = await failureOf(client({ allowLoopback: true, resolve }).post(`${receiver.origin()}/ok`));
    expect(failure).toBe('forbidden_address');
    expect(error.details.address).toBe('10.0.0.1');
    expect(receiver.connections()).toBe(before);
  });

  it.each([
    ['https://169.254.169.254/latest/meta-data/'],
    ['https://2852039166/'],
    ['https://0x7f.1/'],
    ['https://[::ffff:127.0.0.1]/'],
    ['https://[fd00:ec2::254]/'],
  ])('refuses the literal %s without resolving it', async (url) => {
    const { resolve, calls } = tableResolver({});
    const { failure } = await failureOf(client({ resolve }).post(url));
    expect(failure).toBe('forbidden_address');
    expect(calls).toEqual([]);
  });

  it('refuses loopback unless allowLoopback is set', async () => {
    const before = receiver.connections();
    const strict = client({ resolve: tableResolver({ localhost: ['127.0.0.1'] }).resolve });
    const byName = await failureOf(strict.post(`${receiver.origin()}/ok`));
    expect(byName.failure).toBe('forbidden_address');
    expect(byName.error.details.reason).toBe('loopback');
    const byLiteral = await failureOf(strict.post(`https://127.0.0.1:${receiver.port}/ok`));
    expect(byLiteral.failure).toBe('forbidden_address');
    const byOctal = await failureOf(strict.post(`https://0177.0.0.1:${receiver.port}/ok`));
    expect(byOctal.failure).toBe('forbidden_address');
    expect(receiver.connections()).toBe(before);

    const res = await loopbackClient().post(`https://127.0.0.1:${receiver.port}/ok`, { body: 'literal' });
    expect(res.status).toBe(200);
    expect(receiver.connections()).toBeGreaterThan(before);
  });

  it('allowLoopback allows only 127/8 and ::1, not mapped forms or private addresses', async () => {
    for (const address of ['::ffff:127.0.0.1', '10.0.0.1', '0.0.0.0', '169.254.169.254']) {
      const { resolve } = tableResolver({ 'hooks.example.com': [address] });
      const { failure } = await failureOf(client({ allowLoopback: true, resolve }).post('https://hooks.example.com/'));
      expect(failure, address).toBe('forbidden_address');
    }
  });

  it('says what failed in words for a tenant, without resolved addresses or resolver text; the message keeps the detail', async () => {
    const ip = /\b\d{1,3}(\.\d{1,3}){3}\b/;
    const forbidden = await failureOf(client({ resolve: tableResolver({ localhost: ['127.0.0.1'] }).resolve }).post('https://localhost/hook'));
    expect(forbidden.error.message).toContain('127.0.0.1');
    expect(forbidden.error.publicMessage).toBe('localhost resolves to an address that is not public');
    const missing = await failureOf(client({ resolve: tableResolver({}).resolve }).post('https://nowhere.example/'));
    expect(missing.error.message).toContain('getaddrinfo ENOTFOUND nowhere.example');
    expect(missing.error.publicMessage).toBe('nowhere.example does not exist: no such host name');
    const flaky = await failureOf(client({ resolve: () => Promise.reject(Object.assign(new Error('queryA EAI_AGAIN flaky.example 10.9.8.7'), { code: 'EAI_AGAIN' })) }).post('https://flaky.example/'));
    expect(flaky.error.publicMessage).toBe('cannot resolve flaky.example: the DNS lookup failed (it may work later)');
    // A refused connection: the socket's message names the address it tried.
    const closed = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), () => undefined);
    await closed.close();
    const refused = await failureOf(loopbackClient().post(`https://localhost:${closed.port}/`));
    expect(refused.failure).toBe('unreachable');
    expect(refused.error.message).toContain('127.0.0.1');
    expect(refused.error.publicMessage).toBe(`unreachable POST https://localhost:${closed.port}: the connection was refused`);
    for (const { error } of [forbidden, missing, flaky, refused]) {
      expect(error.publicMessage).not.toMatch(ip);
      expect(error.publicMessage).not.toMatch(/ENOTFOUND|EAI_|getaddrinfo|ECONN/);
    }
  });

  it('reports a name that does not resolve as unresolvable', async () => {
    const { failure, error } = await failureOf(client({ resolve: tableResolver({}).resolve }).post('https://nowhere.example/'));
    expect(failure).toBe('unresolvable');
    expect(error.details.transient).toBe(false);
    const flaky = await failureOf(
      client({ resolve: () => Promise.reject(Object.assign(new Error('queryA ETIMEOUT'), { code: 'EAI_AGAIN' })) }).post(
        'https://flaky.example/',
      ),
    );
    expect(flaky.failure).toBe('unresolvable');
    expect(flaky.error.details.transient).toBe(true);
    const empty = await failureOf(client({ resolve: async () => [] }).post('https://empty.example/'));
    expect(empty.failure).toBe('unresolvable');
    // The real resolver: .invalid never resolves.
    const real = await failureOf(client().post('https://no-such-host.invalid/'));
    expect(real.failure).toBe('unresolvable');
  });
});

describe('DNS rebinding', () => {
  it('connects to the checked address, even if the name would resolve elsewhere later', async () => {
    // api.fleet.test is not in any real DNS: only the injected resolver knows it. It answers the
    // loopback receiver once, then a different loopback address where nothing listens (the
    // receiver is bound to 127.0.0.1 only).
    let calls = 0;
    const resolve: Resolver = async (hostname) => {
      expect(hostname).toBe('api.fleet.test');
      calls++;
      return calls === 1 ? [v4('127.0.0.1')] : [v4('127.0.0.2')];
    };
    const rebinding = client({ allowLoopback: true, resolve });
    const before = receiver.requests.length;
    const res = await rebinding.post(`https://api.fleet.test:${receiver.port}/ok`, { body: 'pinned', timeoutMs: 5000 });
    expect(res.status).toBe(200);
    expect(res.address).toBe('127.0.0.1');
    expect(calls).toBe(1);
    const got = receiver.requests.slice(before);
    expect(got).toHaveLength(1);
    expect(got[0]!.headers.host).toBe(`api.fleet.test:${receiver.port}`);
    expect(got[0]!.servername).toBe('api.fleet.test');
    expect(got[0]!.body).toBe('pinned');

    // The next request checks again and connects to the new answer, never reusing the
    // connection pinned to the old one: nothing listens at 127.0.0.2, so it cannot succeed.
    const second = await failureOf(rebinding.post(`https://api.fleet.test:${receiver.port}/ok`));
    expect(second.failure).toBe('unreachable');
    expect(calls).toBe(2);
    expect(receiver.requests.length).toBe(before + 1);
  });

  it('refuses a rebinding to a private address on the next request', async () => {
    let calls = 0;
    const resolve: Resolver = async () => (++calls === 1 ? [v4('127.0.0.1')] : [v4('10.0.0.1')]);
    const rebinding = client({ allowLoopback: true, resolve });
    expect((await rebinding.post(`https://api.fleet.test:${receiver.port}/ok`)).status).toBe(200);
    const { failure } = await failureOf(rebinding.post(`https://api.fleet.test:${receiver.port}/ok`));
    expect(failure).toBe('forbidden_address');
  });
});
