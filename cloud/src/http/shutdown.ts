import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/**
 * The HTTP server's connections and how many requests each has in flight, so that a shutdown
 * can drop every connection that is not answering a request.
 *
 * Node's `closeIdleConnections()` (what fastify's `forceCloseConnections: 'idle'` calls, once)
 * leaves two kinds open: a keep-alive connection whose request finishes after the call (an event
 * stream the hub ends, a slow answer), and a connection that has not sent a request yet, which
 * Node counts as active so that its header timeout applies (a browser's preconnect, a client
 * pool's spare, a TCP health check). `server.close()` stops that timeout's checks, so either kind
 * holds the close until its client goes away: with a keep-alive client, 72 s or forever.
 */
export class ConnectionTracker {
  private readonly requests = new Map<Socket, number>();

  constructor(server: Server) {
    server.on('connection', (socket: Socket) => {
      this.requests.set(socket, 0);
      socket.once('close', () => this.requests.delete(socket));
    });
    server.on('request', (req, res) => {
      const socket = req.socket;
      const n = this.requests.get(socket);
      if (n === undefined) return;
      this.requests.set(socket, n + 1);
      res.once('close', () => {
        const left = this.requests.get(socket);
        if (left !== undefined) this.requests.set(socket, left - 1);
      });
    });
  }

  /** Open connections. */
  get size(): number {
    return this.requests.size;
  }

  /** Destroys every connection without a request in flight (never used, or between requests); returns how many. */
  dropUnused(): number {
    let dropped = 0;
    for (const [socket, inFlight] of this.requests) {
      if (inFlight > 0) continue;
      socket.destroy();
      dropped++;
    }
    return dropped;
  }
}
