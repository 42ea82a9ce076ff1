import { readFile, writeFile } from 'node:fs/promises';
import { Option, type Command } from 'commander';
import { clientFor, intIn, output, type CliContext } from './context.js';
import { CommandFailed, UsageError } from './errors.js';
import { inspectionText } from './inspect-output.js';

/** `--source dst_…=URL` (or a bare URL for every destination): where a destination's objects are. */
function parseSources(values: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const v of values) {
    const eq = v.indexOf('=');
    const [id, url] = eq > 0 && !v.slice(0, eq).includes(':') ? [v.slice(0, eq), v.slice(eq + 1)] : ['*', v];
    if (!/^(s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](\/.*)?|file:\/\/\/.*)$/.test(url)) {
      throw new UsageError(`--source ${v.slice(0, 200)}: the location is s3://bucket[/prefix] or file:///absolute/dir`);
    }
    if (id !== '*' && !/^dst_[a-z0-9]{1,64}$/.test(id)) throw new UsageError(`--source ${v.slice(0, 200)}: a destination id is dst_…`);
    if (out[id] !== undefined) throw new UsageError(`--source names ${id} twice`);
    out[id] = url;
  }
  if (Object.keys(out).length === 0) throw new UsageError('give --source: where the recordings are (s3://bucket[/prefix] or file:///dir, optionally dst_…=URL per destination)');
  return out;
}

const collect = (value: string, previous: string[] | undefined) => [...(previous ?? []), value];

/**
 * `fleet datasets export-lerobot`, `validate-lerobot` and `inspect-recording`: the training
 * bridge. The library (@fleet/lerobot, with the AWS SDK, MCAP and Parquet) is loaded only when one
 * of them runs.
 */
export function registerLeRobot(datasets: Command, ctx: CliContext): void {
  datasets
    .command('export-lerobot <dataset-id>')
    .description('write a snapshot as a LeRobot v3.0 dataset, reading each recording from your own storage (resumable)')
    .requiredOption('--out <dir>', 'the dataset directory (created; an unfinished export there is continued)')
    .option('--source <[dst_…=]url>', 'where recordings are: s3://bucket[/prefix] or file:///dir; per destination with dst_…=url (repeatable)', collect)
    .option('--snapshot', 'snapshot the dataset first if it is still live')
    .option('--mapping <file>', 'a mapping file (JSON): topics to features, fps, task; default: the simulator’s recordings')
    .addOption(new Option('--codec <codec>', 'video codec').choices(['av1', 'h264']).default('av1'))
    .option('--resize <WxH>', 'scale every camera to exactly WxH (bilinear) instead of padding; even sides, at least 64x64 for av1')
    .option('--concurrency <n>', 'episodes fetched and converted at once', intIn(1, 16), 2)
    .option('--strict', 'fail on the first episode that cannot be exported instead of skipping it')
    .option('--data-file-size-mb <n>', 'start a new data file past this size', intIn(1, 10_000), 100)
    .option('--video-file-size-mb <n>', 'start a new video file past this size', intIn(1, 100_000), 200)
    .option('--s3-endpoint <url>', 'an S3-compatible endpoint (default: AWS, or AWS_ENDPOINT_URL_S3)')
    .option('--s3-region <region>', 'the bucket’s region (default: AWS_REGION, else us-east-1)')
    .option('--s3-force-path-style', 'address the bucket in the path (MinIO and most local stores)')
    .option('--keep-work', 'keep the work directory (.fleet-export) after a finished export')
    .action(async (id: string, opts: ExportCliOptions, cmd: Command) => {
      const sources = parseSources(opts.source ?? []);
      if (opts.s3Endpoint !== undefined && !/^https?:\/\/\S+$/.test(opts.s3Endpoint)) throw new UsageError('--s3-endpoint takes an http(s) URL');
      const lerobot = await import('@fleet/lerobot');
      let resize: { width: number; height: number } | undefined;
      if (opts.resize !== undefined) {
        const m = /^(\d{1,5})x(\d{1,5})$/.exec(opts.resize);
        if (m === null) throw new UsageError(`--resize ${opts.resize.slice(0, 40)}: give WIDTHxHEIGHT in pixels, e.g. 640x480`);
        resize = { width: Number(m[1]), height: Number(m[2]) };
        const problem = lerobot.resizeProblem(resize, opts.codec);
        if (problem !== null) throw new UsageError(`--resize ${problem}`);
      }
      let mapping: unknown;
      if (opts.mapping !== undefined) {
        try {
          mapping = JSON.parse(await readFile(opts.mapping, 'utf8')) as unknown;
        } catch (err) {
          throw new UsageError(`--mapping ${opts.mapping}: ${(err as Error).message}`);
        }
      }
      const region = opts.s3Region ?? ctx.env.AWS_REGION ?? ctx.env.AWS_DEFAULT_REGION;
      const client = clientFor(ctx, cmd);
      const dataset = await client.datasets.get(id);
      if (dataset.snapshot_at === null) {
        if (!opts.snapshot) throw new CommandFailed('conflict', `dataset ${id} is live: snapshot it first (fleet datasets snapshot ${id}) or pass --snapshot`);
        await client.datasets.snapshot(id);
      }
      const out = output(ctx, cmd);
      const tty = ctx.stderr.isTTY === true;
      try {
        const result = await lerobot.exportLeRobot({
          manifest: (async function* () {
            for await (const line of client.datasets.manifest(id)) yield line.kind === 'header' ? line.header : line.episode;
          })(),
          outDir: opts.out,
          sources,
          s3: {
            ...(opts.s3Endpoint !== undefined ? { endpoint: opts.s3Endpoint } : {}),
            ...(region !== undefined ? { region } : {}),
            forcePathStyle: opts.s3ForcePathStyle === true,
          },
          ...(mapping !== undefined ? { mapping } : {}),
          codec: opts.codec,
          ...(resize !== undefined ? { resize } : {}),
          concurrency: opts.concurrency,
          strict: opts.strict === true,
          dataFileSizeMb: opts.dataFileSizeMb,
          videoFileSizeMb: opts.videoFileSizeMb,
          keepWork: opts.keepWork === true,
          onProgress: (p) => {
            // The export calls this once a second and at each phase change: a line each time,
            // redrawn in place on a terminal.
            ctx.stderr.write(tty ? `\r\x1b[K${lerobot.progressLine(p)}` : `${lerobot.progressLine(p)}\n`);
          },
        });
        if (tty) ctx.stderr.write('\n');
        for (const s of result.skipped) ctx.stderr.write(`skipped ${s.episode_id}: ${s.reason}: ${s.message}\n`);
        out.done(
          `wrote ${result.episodes} episodes (${result.frames} frames) to ${result.outDir}${result.skipped.length > 0 ? `; ${result.skipped.length} skipped (listed in meta/fleet.json)` : ''}`,
          { ...result },
        );
      } catch (err) {
        if (tty) ctx.stderr.write('\n');
        if (err instanceof lerobot.ExportError) throw new CommandFailed(err.code, err.message, lerobot.EXPORT_ERROR_CODES[err.code].exit);
        throw err;
      }
    });

  datasets
    .command('validate-lerobot <dir>')
    .description('read a LeRobot v3.0 dataset back and check LeRobot’s invariants (exit 1 naming the first broken one)')
    .option('--no-videos', 'skip decoding the videos (ffprobe)')
    .action(async (dir: string, opts: { videos: boolean }, cmd: Command) => {
      const lerobot = await import('@fleet/lerobot');
      const res = await lerobot.validateLeRobotDataset(dir, { checkVideos: opts.videos });
      if (!res.ok) throw new CommandFailed(res.problem.invariant, `${res.problem.where}: ${res.problem.message}`);
      const s = res.summary;
      output(ctx, cmd).done(`${dir} is a valid LeRobot v3.0 dataset: ${s.episodes} episodes, ${s.frames} frames, ${s.tasks} tasks, ${s.dataFiles} data files, ${s.videoFiles} video files`, { ...s });
    });

  datasets
    .command('inspect-recording <path>')
    .description('list a recording’s topics (types, encodings, counts, rates, stamps, fields, image sizes) and propose an export mapping; an .mcap file or a rosbag2 directory, read locally')
    .option('--mapping-out <file>', 'write the proposed mapping (JSON) to this file, for export-lerobot --mapping')
    .action(async (path: string, opts: { mappingOut?: string }, cmd: Command) => {
      const lerobot = await import('@fleet/lerobot');
      let inspection;
      try {
        inspection = await lerobot.inspectRecording(path);
      } catch (err) {
        if (err instanceof lerobot.InspectError) {
          if (err.code === 'not_found') throw new UsageError(err.message);
          throw new CommandFailed(err.code, err.message);
        }
        throw err;
      }
      if (opts.mappingOut !== undefined) {
        if (inspection.mapping === null) throw new CommandFailed('no_mapping', `${path}: no topic maps to a LeRobot feature (no JointState, command or readable camera topic), so there is no mapping to write`);
        try {
          await writeFile(opts.mappingOut, `${JSON.stringify(inspection.mapping, null, 2)}\n`);
        } catch (err) {
          throw new UsageError(`--mapping-out ${opts.mappingOut}: ${(err as Error).message}`);
        }
      }
      const out = output(ctx, cmd);
      if (out.json) out.record(inspection);
      else ctx.stdout.write(inspectionText(inspection, opts.mappingOut));
    });
}

interface ExportCliOptions {
  out: string;
  source?: string[];
  snapshot?: boolean;
  mapping?: string;
  codec: 'av1' | 'h264';
  resize?: string;
  concurrency: number;
  strict?: boolean;
  dataFileSizeMb: number;
  videoFileSizeMb: number;
  s3Endpoint?: string;
  s3Region?: string;
  s3ForcePathStyle?: boolean;
  keepWork?: boolean;
}
