/**
 * A cluster node's wills in Redis (cloud/src/mqtt/will-store.ts), on a real redis-server: a hash
 * per node, so putting and deleting a will costs the same at 100,000 robots as at ten, and a dead
 * node's wills are found by reading that node's hash alone. aedes-persistence-redis's own will
 * methods kept one list of every will and ran an LREM over it on each connect and disconnect;
 * this checks that none runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { installWillStore, WILL_NODES_KEY, willsKey, type StoredWill, type WillMethods } from '../cloud/src/mqtt/will-store.js';
import { ensureDebianPackages, REDIS } from './support/debian.js';
import { freePort } from './support/http.js';
import { spawnProcess, type SpawnedProcess } from './support/process.js';

describe('cluster wills in Redis', () => {
  let server: SpawnedProcess;
  let a: Redis;
  let b: Redis;
  let nodeA: WillMethods;
  let nodeB: WillMethods;

  beforeAll(async () => {
    if (!REDIS.find()) ensureDebianPackages([REDIS]);
    const port = await freePort();
    server = spawnProcess(REDIS.find()!, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { name: 'redis-server' });
    await server.waitForStdout((l) => l.includes('Ready to accept connections'), { timeoutMs: 30_000, description: 'redis-server to be ready' });
    a = new Redis(port, '127.0.0.1');
    b = new Redis(port, '127.0.0.1');
    nodeA = installWillStore({}, a, () => 'nodeA');
    nodeB = installWillStore({}, b, () => 'nodeB');
  }, 120_000);
  afterAll(async () => {
    a?.disconnect();
    b?.disconnect();
    await server?.kill('SIGKILL');
  });

  const will = (id: string) => ({ cmd: 'publish', topic: `fleet/v1/robots/${id}/status`, payload: Buffer.from(JSON.stringify({ online: false, id })), qos: 1, retain: true });
  const read = async (stream: NodeJS.ReadableStream): Promise<StoredWill[]> => {
    const out: StoredWill[] = [];
    for await (const w of stream as AsyncIterable<StoredWill>) out.push(w);
    return out;
  };

  it("keeps each node's wills apart, hands a dead node's to the living, and never scans a list of every will", async () => {
    const idsA = Array.from({ length: 2000 }, (_, i) => `rbt_a${i}`);
    for (const id of idsA) await nodeA.putWill({ id }, will(id));
    for (const id of ['rbt_b0', 'rbt_b1']) await nodeB.putWill({ id }, will(id));

    // Read back as aedes wrote it: the payload a Buffer, the node and client named.
    const got = await nodeA.getWill({ id: 'rbt_a7' });
    expect(got).toMatchObject({ clientId: 'rbt_a7', brokerId: 'nodeA', topic: 'fleet/v1/robots/rbt_a7/status', qos: 1, retain: true });
    expect(Buffer.isBuffer(got!.payload) && JSON.parse(got!.payload.toString())).toEqual({ online: false, id: 'rbt_a7' });
    expect(await nodeB.getWill({ id: 'rbt_a7' })).toBeNull();

    // Both alive: no will of anyone is handed out.
    expect(await read(nodeB.streamWill({ nodeA: 1, nodeB: 1 }))).toEqual([]);
    // nodeA dead: nodeB gets every one of nodeA's wills, none of its own.
    const dead = await read(nodeB.streamWill({ nodeB: 1 }));
    expect(dead.map((w) => w.clientId).sort()).toEqual([...idsA].sort());
    expect(new Set(dead.map((w) => w.brokerId))).toEqual(new Set(['nodeA']));

    // Publishing a will deletes it by its node and client; deleting twice finds nothing.
    expect(await nodeB.delWill({ id: 'rbt_a0', brokerId: 'nodeA' })).toMatchObject({ clientId: 'rbt_a0' });
    expect(await nodeB.delWill({ id: 'rbt_a0', brokerId: 'nodeA' })).toBeNull();
    // A connecting client's earlier will (aedes passes the client, no node): the node's own.
    expect(await nodeB.delWill({ id: 'rbt_b1' })).toMatchObject({ clientId: 'rbt_b1', brokerId: 'nodeB' });

    for (const id of idsA.slice(1)) await nodeB.delWill({ id, brokerId: 'nodeA' });
    expect(await a.hlen(willsKey('nodeA'))).toBe(0);
    // The next pass over a dead node with no wills left forgets the node.
    expect(await read(nodeB.streamWill({ nodeB: 1 }))).toEqual([]);
    expect(await a.smembers(WILL_NODES_KEY)).toEqual(['nodeB']);

    // aedes-persistence-redis's list of every will was never written, and no LREM ran.
    expect(await a.exists('will')).toBe(0);
    const stats = await a.info('commandstats');
    expect(stats).not.toMatch(/cmdstat_lrem:/);
    expect(stats).toMatch(/cmdstat_hset:calls=2002,/);
  });
});
