/**
 * The processes behind the console's playback tests and the playback benchmark: the customer's
 * bucket, the cloud, the grant provider and robots whose recordings are verified in the bucket.
 *
 *   client ──> the cloud's front (a logging pass-through: what the client sent to and got from
 *     │         the cloud, in body bytes) ──> `fleet-cloud serve --read-origin <bucket origin>`
 *     │                                         │ read.request / grant.request (signed, HTTPS)
 *     │                                         v
 *     │                                `fleet-sim grant-provider` (reads on, or off by option),
 *     │                                 the destination of a catch-all routing rule
 *     │ Range GETs of presigned URLs          │ presigns for
 *     v                                        v
 *   the S3 server (s3rver, SigV4 checked) with the bucket's CORS rule for the front's (and the
 *   cloud's) origin and a request log; robots upload into it through grants:
 *     - `fleet-sim fleet` robots whose simulated ROS 2 recordings (a rosbag2 bag: JointState,
 *       CompressedImage JPEG, Image rgb8, zstd chunks) reach `verified`;
 *     - on demand, a real agent with the `import` recorder, fed a bag written by Python's rosbags
 *       (`addRosbagsEpisode`) or any recording the caller writes (`addImportedEpisode`).
 *
 * With `readsFront`, a scripted HTTPS stand-in is the destination instead, in front of the
 * provider: it passes everything on unless a test scripts how read requests are answered.
 *
 * `episodeFile` gives the bytes the bucket holds as a local file (s3rver's own file, read without
 * a request that would show in the log) for expected values. console/test/playback-harness.ts
 * adds a signed-in chromium. Dispose it: everything stops, newest first, and its temp dirs go.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { ServerResponse } from 'node:http';
import { READ_EVENT, ReadRequestEnvelopeSchema, type ReadRequestEnvelope } from '@fleet/protocol';
import { Agent as UndiciAgent, request as undiciRequest } from 'undici';
import { createTestPki, startHttpsReceiver, type ReceivedRequest } from '../../cloud/src/egress/test-https.js';
import { makeTempDir, startCloud, type CloudProcess } from './cloud.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from './grant-provider.js';
import { freePort, okJson } from './http.js';
import { startHttpLogProxy, type LoggedHttpRequest } from './http-log-proxy.js';
import { ensurePythonEnv } from './python.js';
import { startImportRobot, waitVerified, writePythonRecording, type ImportRobot } from './recordings.js';
import { createEnrollmentToken, sendCommand, startFleet, waitForRobot, type FleetProcess } from './robots.js';
import { startS3Server, type S3Request, type S3ServerProcess } from './s3-server.js';
import { startedParts } from './parts.js';

/** The simulated robots' recording unless `simArgs` says otherwise: two cameras of 160x120 at 15 fps (front JPEG + raw rgb8, wrist JPEG), joints at 50 Hz. */
export const DEFAULT_SIM_ARGS: readonly string[] = ['--recording-format', 'ros2', '--cameras', '2', '--camera-width', '160', '--camera-height', '120', '--camera-hz', '15', '--state-hz', '50'];

export interface PlaybackStackOptions {
  /** Simulated robots (default 1; 0 for none). */
  robots?: number;
  /** Episodes each simulated robot records, one after the other (default 1). */
  episodesPerRobot?: number;
  /** How long each simulated episode records (default 3000 ms). */
  episodeMs?: number;
  /** `fleet-sim fleet` flags for the recording (default DEFAULT_SIM_ARGS). */
  simArgs?: readonly string[];
  /** Episodes imported from bags written by Python's rosbags (default 0; more with `addRosbagsEpisode`). */
  rosbags?: number;
  /** The grant provider issues read links (default true; false: it answers read requests 501). */
  reads?: boolean;
  /** More `fleet-sim grant-provider` flags. */
  providerArgs?: readonly string[];
  /** The bucket's CORS rule allows the console's origins (default true; false: no CORS rule at all). */
  cors?: boolean;
  /** The cloud's read origins (default: the S3 server's origin). */
  readOrigins?: readonly string[];
  /** More `fleet-cloud serve` flags. */
  cloudArgs?: readonly string[];
  /** Directory of the cloud's static console (`--console-dir`), when a browser opens it. */
  consoleDir?: string;
  /**
   * A scripted stand-in in front of the provider (default false): the destination's URL is then
   * the stand-in's (HTTPS with the stack's test CA), which passes every request on to the
   * reference provider, the cloud's signature included, unless `scriptReads` set how it answers
   * read requests (a refusal, an error, no answer, links elsewhere).
   */
  readsFront?: boolean;
}

/** How the stand-in answers one read request (`scriptReads`): write `res`, or never (a provider that hangs). */
export type ReadScript = (request: ReadRequestEnvelope, res: ServerResponse) => void;

/** One episode whose recording is verified in the bucket. */
export interface PlaybackEpisode {
  id: string;
  robotId: string;
  /** Where its files are in the bucket: `<objectKey><path>`. */
  objectKey: string;
  destinationId: string;
  /** The manifest's files. */
  files: { path: string; size_bytes: number; sha256: string }[];
  /** The manifest path of its (first) MCAP file. */
  mcap: string;
  source: 'simulator' | 'rosbags' | 'import';
}

export interface PlaybackStack extends AsyncDisposable {
  readonly cloud: CloudProcess;
  /** The cloud's origin as clients use it (its logging front); the console is at `${baseUrl}/console/`. */
  readonly baseUrl: string;
  readonly adminKey: string;
  readonly s3: S3ServerProcess;
  /** The S3 server's origin: the cloud's read origin, what presigned URLs point at. */
  readonly bucketOrigin: string;
  readonly destinationId: string;
  /** The provider now running (replaced by `restartProvider`). */
  readonly provider: GrantProviderProcess;
  readonly fleet: FleetProcess | null;
  /** The simulated robots' ids. */
  readonly robots: readonly string[];
  /** The verified episodes, in the order recorded (the simulated ones first, robot by robot); `add…Episode` appends. */
  readonly episodes: readonly PlaybackEpisode[];
  /** `${baseUrl}/console/episodes/<id>`. */
  episodeUrl(id: string): string;
  /** The local file holding what the bucket holds for the episode's `path` (default its MCAP); read it, never write it. */
  episodeFile(id: string, path?: string): string;
  /** What the S3 server answered since the setup (or the last `clearS3Requests`), oldest first. */
  s3Requests(): Promise<S3Request[]>;
  clearS3Requests(): Promise<void>;
  /** What crossed the cloud's front since the setup (or the last `clearCloudRequests`), with body sizes both ways. */
  cloudRequests(): LoggedHttpRequest[];
  clearCloudRequests(): void;
  /** Imports one more episode from a rosbag2 bag written by Python's rosbags (test/python/write_judge_recordings.py), verified. */
  addRosbagsEpisode(opts?: { task?: string }): Promise<PlaybackEpisode>;
  /**
   * Imports one recording the caller writes into the import folder (`write(folder, startNs)`: a
   * rosbag2 directory or an `.mcap`, complete when `write` resolves or renamed in from a
   * `.`-name), as a robot whose own stack records; resolves once it is verified.
   */
  addImportedEpisode(write: (folder: string, startNs: bigint) => Promise<void>, opts?: { task?: string; timeoutMs?: number }): Promise<PlaybackEpisode>;
  /** Stops the provider and starts it again on the same port with reads on or off (the destination stays). */
  restartProvider(opts: { reads: boolean }): Promise<void>;
  /**
   * With `readsFront`: how the stand-in answers read requests from now on; `null` passes them on
   * to the provider again. Answers left unwritten (a hanging provider) are ended at dispose.
   */
  scriptReads(script: ReadScript | null): void;
  /** With `readsFront`: every read request the stand-in received, oldest first. */
  readonly readRequests: readonly ReadRequestEnvelope[];
}

export async function startPlaybackStack(opts: PlaybackStackOptions = {}): Promise<PlaybackStack> {
  const robotCount = opts.robots ?? 1;
  const perRobot = opts.episodesPerRobot ?? 1;
  const episodeMs = opts.episodeMs ?? 3000;
  const parts = startedParts('the playback stack');
  const dispose = () => parts.dispose();
  const own = <T extends AsyncDisposable>(part: T): T => parts.own(part);
  try {
    const tmp = own(await makeTempDir('fleet-playback-'));
    const pki = createTestPki();
    own({ [Symbol.asyncDispose]: async () => pki.cleanup() });
    const tls = writeProviderTls(pki, tmp.path);

    const s3 = own(await startS3Server({ implementation: 's3rver', requestLog: true }));
    const bucketOrigin = new URL(s3.endpoint).origin;
    const cloud = own(
      await startCloud({
        args: [
          ...(opts.consoleDir !== undefined ? ['--console-dir', opts.consoleDir] : []),
          '--egress-allow-loopback',
          '--egress-ca-file',
          pki.caFile,
          ...(opts.readOrigins ?? [bucketOrigin]).flatMap((o) => ['--read-origin', o]),
          ...(opts.cloudArgs ?? []),
        ],
        logLevel: 'warn',
      }),
    );
    const front = own(await startHttpLogProxy(cloud.http));
    // The page's origin is the front's; the cloud's own is allowed too (a test may open it directly).
    if (opts.cors ?? true) await s3.setCors([front.url, cloud.http]);

    // The provider on a port chosen now: the destination names it, and a restart keeps it.
    const port = await freePort();
    const readsFront = opts.readsFront === true ? own(await startReadsFront(pki, `https://127.0.0.1:${port}/grant`)) : undefined;
    const destination = await okJson<{ id: string; secret: string }>(
      await cloud.fetch('/v1/destinations', { method: 'POST', json: { type: 'external', url: readsFront?.url ?? `https://127.0.0.1:${port}/grant` } }),
    );
    await okJson(await cloud.fetch('/v1/routing-rules', { method: 'POST', json: { destination_id: destination.id, match: {} } }));
    const startProvider = (reads: boolean) =>
      startGrantProvider({ s3, secret: destination.secret, tls, reads, args: ['--port', String(port), '--log-level', 'warn', ...(opts.providerArgs ?? [])] });
    let provider = await startProvider(opts.reads ?? true);
    own({ [Symbol.asyncDispose]: () => provider[Symbol.asyncDispose]() });

    let fleet: FleetProcess | null = null;
    if (robotCount > 0) {
      const token = await createEnrollmentToken(cloud, { maxUses: robotCount });
      fleet = own(await startFleet(cloud, { count: robotCount, token: token.token, logLevel: 'warn', args: ['--allow-http-uploads', ...(opts.simArgs ?? DEFAULT_SIM_ARGS)] }));
    }

    const episodes: PlaybackEpisode[] = [];
    const describe = async (id: string, source: PlaybackEpisode['source'], timeoutMs?: number): Promise<PlaybackEpisode> => {
      const ep = await waitVerified(cloud, id, timeoutMs !== undefined ? { timeoutMs } : {});
      const replica = ep.replicas[0]!;
      const { files } = await cloud.client().episodes.files(id);
      const mcap = files.find((f) => f.path.endsWith('.mcap'));
      if (!mcap) throw new Error(`episode ${id} has no .mcap file: ${files.map((f) => f.path).join(', ')}`);
      if (replica.object_key === null || replica.object_key === undefined) throw new Error(`episode ${id}: its verified replica has no object key`);
      return { id, robotId: ep.robot_id, objectKey: replica.object_key, destinationId: replica.destination_id, files, mcap: mcap.path, source };
    };

    // Each robot records its episodes one after the other; the robots at the same time.
    const recorded = await Promise.all(
      (fleet?.robots ?? []).map(async (robot) => {
        const ids: string[] = [];
        for (let i = 0; i < perRobot; i++) {
          await waitForRobot(cloud, robot, (r) => r.recording_state === 'idle', { timeoutMs: 60_000, description: 'idle' });
          const start = await sendCommand(cloud, robot, 'episodes/start', { body: { task_id: 'pick-cube' } });
          if (start.status !== 200) throw new Error(`episodes/start on ${robot} answered ${start.status}: ${JSON.stringify(start.body)}`);
          // The episode's length is what is recorded; nothing else is waited on here.
          await new Promise((r) => setTimeout(r, episodeMs));
          const finish = await sendCommand(cloud, robot, 'episodes/finish');
          if (finish.status !== 200) throw new Error(`episodes/finish on ${robot} answered ${finish.status}: ${JSON.stringify(finish.body)}`);
          ids.push(String(start.body.result!.episode_id));
        }
        return ids;
      }),
    );
    for (const id of recorded.flat()) episodes.push(await describe(id, 'simulator'));

    // The import robot starts on first use (a real agent; Python only for rosbags).
    let importer: ImportRobot | undefined;
    let imports = 0;
    const importRobot = async () => (importer ??= own(await startImportRobot(cloud, { dir: join(tmp.path, 'importer'), importTimeoutMs: 600_000 })));
    const addImportedEpisode: PlaybackStack['addImportedEpisode'] = async (write, o = {}) => {
      const robot = await importRobot();
      const task = o.task ?? `imported-${++imports}`;
      const [ep] = await robot.importEpisodes(task, 1, (_i, startNs) => write(robot.folder, startNs));
      const episode = await describe(ep!.id, 'import', o.timeoutMs ?? 600_000);
      episodes.push(episode);
      return episode;
    };
    let rosbagRuns = 0;
    const addRosbagsEpisode: PlaybackStack['addRosbagsEpisode'] = async (o = {}) => {
      const python = ensurePythonEnv();
      const n = rosbagRuns++;
      const episode = await addImportedEpisode(
        // Written in place, as `ros2 bag record` does: the watcher waits for metadata.yaml and closed MCAPs.
        (folder, startNs) => writePythonRecording(python, 'rosbag2', join(folder, `rosbag2_run${n}`), startNs, { cwd: tmp.path }),
        { task: o.task ?? `rosbags-${n}` },
      );
      episode.source = 'rosbags';
      return episode;
    };
    for (let i = 0; i < (opts.rosbags ?? 0); i++) await addRosbagsEpisode();

    await s3.clearRequests();
    front.clear();

    const byId = (id: string) => {
      const e = episodes.find((x) => x.id === id);
      if (!e) throw new Error(`episode ${id} is not one of the harness's`);
      return e;
    };
    return {
      cloud,
      baseUrl: front.url,
      adminKey: cloud.adminKey,
      s3,
      bucketOrigin,
      destinationId: destination.id,
      get provider() {
        return provider;
      },
      fleet,
      robots: fleet?.robots ?? [],
      episodes,
      episodeUrl: (id) => `${front.url}/console/episodes/${id}`,
      episodeFile(id, path) {
        const e = byId(id);
        const file = s3.objectFile(`${e.objectKey}${path ?? e.mcap}`);
        if (file === null || !existsSync(file)) throw new Error(`no object ${e.objectKey}${path ?? e.mcap} in the bucket`);
        return file;
      },
      s3Requests: () => s3.requests(),
      clearS3Requests: () => s3.clearRequests(),
      cloudRequests: () => front.requests(),
      clearCloudRequests: () => front.clear(),
      addRosbagsEpisode,
      addImportedEpisode,
      async restartProvider({ reads }) {
        // SIGKILL: a graceful stop waits for the cloud's kept-alive connections to go idle.
        await provider.kill('SIGKILL');
        await provider[Symbol.asyncDispose]();
        provider = await startProvider(reads);
      },
      scriptReads(script) {
        if (!readsFront) throw new Error('scriptReads: start the stack with readsFront: true');
        readsFront.script = script;
      },
      get readRequests() {
        return readsFront?.reads ?? [];
      },
      [Symbol.asyncDispose]: dispose,
    };
  } catch (err) {
    await dispose().catch(() => undefined);
    throw err;
  }
}

/**
 * The scripted stand-in of `readsFront`: an HTTPS receiver (a certificate of the stack's test CA,
 * which the cloud trusts) that passes each request on to `target` with the cloud's headers, or
 * answers read requests by `script` when one is set.
 */
async function startReadsFront(pki: ReturnType<typeof createTestPki>, target: string) {
  const dispatcher = new UndiciAgent({ connect: { ca: pki.caPem } });
  const pending = new Set<ServerResponse>();
  const state: { script: ReadScript | null; reads: ReadRequestEnvelope[] } = { script: null, reads: [] };
  const forward = async (req: ReceivedRequest, res: ServerResponse) => {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && !['host', 'content-length', 'connection'].includes(k)) headers[k] = v;
    try {
      const answer = await undiciRequest(target, { method: 'POST', body: req.body, headers, dispatcher });
      const type = answer.headers['content-type'];
      res.writeHead(answer.statusCode, typeof type === 'string' ? { 'content-type': type } : {});
      res.end(await answer.body.text());
    } catch {
      // The provider is down (a restart): the cloud sees an unreachable provider, as it would.
      res.destroy();
    }
  };
  const receiver = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
    if (req.headers['x-service-event'] !== READ_EVENT) return void forward(req, res);
    const envelope = ReadRequestEnvelopeSchema.parse(JSON.parse(req.body));
    state.reads.push(envelope);
    const script = state.script;
    if (script === null) return void forward(req, res);
    pending.add(res);
    res.on('close', () => pending.delete(res));
    script(envelope, res);
  });
  return Object.assign(state, {
    url: `https://127.0.0.1:${receiver.port}/grant`,
    async [Symbol.asyncDispose]() {
      for (const res of pending) res.destroy();
      await receiver.close();
      await dispatcher.close();
    },
  });
}
