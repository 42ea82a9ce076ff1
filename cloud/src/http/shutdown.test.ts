import { Agent, createServer, request, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ConnectionTracker } from './shutdown.js';

/** A plain node server and real sockets: what a shutdown drops and what it lets finish. */

let server: Server;
let tracker: ConnectionTracker;
let answer: (() => void) | null = null;
const sockets: Socket[] = [];

async function listen(): Promise<number> {
  server = createServer((req, res) => {
    // GET /hold is answered when the test says so; anything else at once.
    if (req.url === '/hold') answer = () => res.end('held');
    else res.end('ok');
  });
  server.keepAliveTimeout = 60_000;
  tracker = new ConnectionTracker(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  answer = null;
});

function rawConnection(port: number): Promise<{ socket: Socket; closed: Promise<void> }> {
  const socket = connect(port, '127.0.0.1');
  sockets.push(socket);
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return new Promise((resolve) => socket.once('connect', () => resolve({ socket, closed })));
}

function get(port: number, path: string, agent: Agent): Promise<string> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port, path, agent }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve(body));
    })
      .on('error', reject)
      .end();
  });
}

describe('ConnectionTracker', () => {
  it("drops a connection that never sent a request, which node's closeIdleConnections leaves open", async () => {
    const port = await listen();
    const { closed } = await rawConnection(port);
    await expect.poll(() => tracker.size).toBe(1);
    server.closeIdleConnections();
    // Still there: node counts a connection without a request as active (its header timeout applies).
    expect(tracker.size).toBe(1);
    const serverClosed = new Promise((resolve) => server.close(resolve));
    expect(tracker.dropUnused()).toBe(1);
    await closed;
    await serverClosed;
    expect(tracker.size).toBe(0);
  });

  it('leaves a connection answering a request, and drops it once the answer is out', async () => {
    const port = await listen();
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      expect(await get(port, '/', agent)).toBe('ok');
      const held = get(port, '/hold', agent);
      await expect.poll(() => answer).not.toBeNull();
      const serverClosed = new Promise((resolve) => server.close(resolve));
      expect(tracker.dropUnused()).toBe(0);
      answer!();
      expect(await held).toBe('held');
      // Answered, the keep-alive connection is unused again: dropped, and the close completes.
      await expect.poll(() => tracker.dropUnused()).toBe(1);
      await serverClosed;
    } finally {
      agent.destroy();
    }
  });
});
