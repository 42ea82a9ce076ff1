import { registerLeRobot } from './commands-lerobot.js';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { Option, type Command } from 'commander';
import { READ_LINKS_MAX_FILES, STREAM_PAGE_LIMIT } from '@fleet/protocol';
import { ROBOT_COMMAND_ACTIONS, type RobotCommandAction } from '../client.js';
import type { Dataset, Episode, EpisodeFilters, Robot } from '../types.js';
import { UsageError } from './errors.js';
import { exportEpisodes } from './export.js';
import { clientFor, intIn, jsonOrString, oneOf, output, pair, type CliContext } from './context.js';
import type { Column } from './output.js';
import { robotLabels } from './robot-names.js';

const ROBOT_COLUMNS: Column<Robot>[] = [
  { header: 'id', value: (r) => r.id },
  { header: 'name', value: (r) => r.name },
  { header: 'connected', value: (r) => r.connected },
  { header: 'recording', value: (r) => r.recording_state },
  { header: 'platform', value: (r) => r.platform },
  { header: 'last seen', value: (r) => r.last_seen_at },
];

/** The episode table; `robot` names a robot id (its name where known, see robotLabels). */
const episodeColumns = (robot: (id: string) => string): Column<Episode>[] => [
  { header: 'id', value: (e) => e.id },
  { header: 'robot', value: (e) => robot(e.robot_id) },
  { header: 'task', value: (e) => e.task_id },
  { header: 'outcome', value: (e) => e.outcome },
  { header: 'started', value: (e) => e.started_at },
  { header: 'duration s', value: (e) => e.duration_s },
];

const DATASET_COLUMNS: Column<Dataset>[] = [
  { header: 'id', value: (d) => d.id },
  { header: 'name', value: (d) => d.name },
  { header: 'state', value: (d) => (d.snapshot_at ? 'snapshot' : 'live') },
  { header: 'episodes', value: (d) => d.episode_count },
  { header: 'snapshot at', value: (d) => d.snapshot_at },
];

/** The episode list's filters as flags, shared by `episodes list` and `episodes export`. */
const FILTERS = [
  ['robot-id', 'robot_id', 'robot that recorded it'],
  ['task-id', 'task_id', 'task'],
  ['subtask-id', 'subtask_id', 'subtask'],
  ['operator-id', 'operator_id', 'operator'],
  ['control-mode', 'control_mode', 'control mode (e.g. teleop, autonomous)'],
  ['policy-version-id', 'policy_version_id', 'policy version'],
  ['eval-id', 'eval_id', 'evaluation run (evaluation episodes are listed only with it)'],
  ['from', 'from', 'started_at lower bound (date-time)'],
  ['to', 'to', 'started_at upper bound (date-time)'],
  ['destination-id', 'destination_id', 'with --sync-state: the destination it is about'],
] as const;

function withFilters(cmd: Command): Command {
  for (const [flag, , help] of FILTERS) cmd.option(`--${flag} <value>`, help);
  return cmd
    .addOption(new Option('--outcome <outcome>', 'success, failure or discarded (discarded ones are listed only with it)').argParser(oneOf(['success', 'failure', 'discarded'] as const)))
    .addOption(new Option('--sync-state <state>', 'unverified, synced or verified').argParser(oneOf(['unverified', 'synced', 'verified'] as const)))
    .option('--metadata <key=value>', 'recorded metadata equals (repeatable)', pair)
    .option('--annotation <key=value>', 'annotation equals (repeatable)', pair);
}

type FilterOpts = Record<string, unknown> & { metadata?: [string, string][]; annotation?: [string, string][] };

function filtersOf(opts: FilterOpts): EpisodeFilters {
  const f: Record<string, string> = {};
  for (const [flag, key] of FILTERS) {
    const camel = flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    if (typeof opts[camel] === 'string') f[key] = opts[camel];
  }
  if (typeof opts.outcome === 'string') f.outcome = opts.outcome;
  if (typeof opts.syncState === 'string') f.sync_state = opts.syncState;
  for (const [k, v] of opts.metadata ?? []) f[`metadata.${k}`] = v;
  for (const [k, v] of opts.annotation ?? []) f[`annotation.${k}`] = v;
  // Every key here is an equality family's (string values): none of the presence families.
  return f as EpisodeFilters;
}

export function registerData(program: Command, ctx: CliContext): void {
  const robots = program.command('robots').description('the organization’s robots');
  robots
    .command('list')
    .description('every robot (all pages)')
    .action(async (_o, cmd: Command) => {
      const all: Robot[] = [];
      for await (const r of clientFor(ctx, cmd).robots.iterate({ limit: 100 })) all.push(r);
      output(ctx, cmd).list({ robots: all }, all, ROBOT_COLUMNS);
    });
  robots
    .command('get <robot-id>')
    .description('one robot')
    .action(async (id: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).robots.get(id)));
  robots
    .command('deenroll <robot-id>')
    .description('de-enroll (admin): its broker credentials stop at once, its episodes stay')
    .action(async (id: string, _o, cmd: Command) => {
      await clientFor(ctx, cmd).robots.deenroll(id);
      output(ctx, cmd).done(`de-enrolled ${id}`, { id });
    });
  robots
    .command('rotate-credentials <robot-id>')
    .description("rotate the robot's broker secret over its command channel (admin): completed, or pending until it is online")
    .action(async (id: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).robots.rotateCredentials(id)));
  robots
    .command('command <robot-id> <action>')
    .description(`send a command and wait for the robot's answer; action: ${ROBOT_COMMAND_ACTIONS.join(', ')}`)
    .option('--task-id <id>', 'episodes/start: the task')
    .option('--subtask-id <id>', 'episodes/start: the subtask')
    .option('--metadata <key=value>', 'episodes/start: recorded metadata (repeatable; JSON values are parsed)', pair)
    .option('--idempotency-key <key>', 'the command id; resend with the same key to ask again without acting twice')
    .action(async (id: string, action: string, opts: { taskId?: string; subtaskId?: string; metadata?: [string, string][]; idempotencyKey?: string }, cmd: Command) => {
      if (!(ROBOT_COMMAND_ACTIONS as readonly string[]).includes(action)) throw new UsageError(`unknown action '${action.slice(0, 64)}': one of ${ROBOT_COMMAND_ACTIONS.join(', ')}`);
      const isStart = action === 'episodes/start';
      if (!isStart && (opts.taskId || opts.subtaskId || opts.metadata)) throw new UsageError('--task-id, --subtask-id and --metadata are for episodes/start only');
      const body = isStart
        ? {
            ...(opts.taskId ? { task_id: opts.taskId } : {}),
            ...(opts.subtaskId ? { subtask_id: opts.subtaskId } : {}),
            ...(opts.metadata ? { metadata: Object.fromEntries(opts.metadata.map(([k, v]) => [k, jsonOrString(v)])) } : {}),
          }
        : undefined;
      const res = await clientFor(ctx, cmd).robots.command(id, action as RobotCommandAction, body, opts.idempotencyKey ? { idempotencyKey: opts.idempotencyKey } : {});
      output(ctx, cmd).record(res);
      const result = res.result as { ok?: unknown; error?: { code?: string; message?: string } };
      if (result.ok === false) {
        // A 200 all the same: the robot answered, and said no.
        output(ctx, cmd).note(`fleet: robot declined: ${result.error?.code ?? 'failed'}: ${result.error?.message ?? ''}`);
        process.exitCode = 1;
      }
    });

  const episodes = program.command('episodes').description('recorded episodes: query, annotate, export');
  withFilters(
    episodes
      .command('list')
      .description('one page of matching episodes, in the order they were indexed (--all: every page)')
      .addOption(new Option('--limit <n>', 'page size (1-100, default 50)').argParser(intIn(1, 100)))
      .option('--cursor <cursor>', 'continue from a previous page')
      .option('--all', 'follow the cursor to the end')
      .addHelpText(
        'after',
        `
Examples:
  $ fleet episodes list --robot-id rbt_123 --outcome success --limit 20
  $ fleet episodes list --task-id pick --from 2026-01-01T00:00:00Z --all --json
  $ fleet episodes list --metadata site=lab --annotation grade=3
  $ fleet episodes list --sync-state unverified --destination-id dst_123`,
      ),
  ).action(async (opts: FilterOpts & { limit?: number; cursor?: string; all?: boolean }, cmd: Command) => {
    const client = clientFor(ctx, cmd);
    const filters = filtersOf(opts);
    const page = { ...(opts.limit !== undefined ? { limit: opts.limit } : {}), ...(opts.cursor !== undefined ? { cursor: opts.cursor } : {}) };
    const out = output(ctx, cmd);
    // The API's JSON stays as it is; a table names the robots (one robot list read, not one per row).
    const columns = async (rows: readonly Episode[]) => episodeColumns(out.json ? (id) => id : await robotLabels(client, rows.map((e) => e.robot_id)));
    if (opts.all) {
      const all: Episode[] = [];
      for await (const e of client.episodes.iterate(filters, page)) all.push(e);
      out.list({ episodes: all, cursor: null }, all, await columns(all));
      return;
    }
    const res = await client.episodes.list(filters, page);
    out.list(res, res.episodes, await columns(res.episodes));
    if (res.cursor && !out.json) out.note(`more: --cursor ${res.cursor}`);
  });
  episodes
    .command('get <episode-id>')
    .description('one episode')
    .action(async (id: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).episodes.get(id)));
  episodes
    .command('segments <episode-id>')
    .description('an episode’s control segments')
    .action(async (id: string, _o, cmd: Command) => {
      const res = await clientFor(ctx, cmd).episodes.segments(id);
      output(ctx, cmd).list(res, res.segments, [
        { header: '#', value: (s) => s.segment_index },
        { header: 'subtask', value: (s) => s.subtask_name ?? s.subtask_id },
        { header: 'start s', value: (s) => s.start_offset_s },
        { header: 'end s', value: (s) => s.end_offset_s },
      ]);
    });
  episodes
    .command('annotate <episode-id>')
    .description('merge annotations: --set key=value (JSON values are parsed), --delete key')
    .option('--set <key=value>', 'set an annotation (repeatable)', pair)
    .option('--delete <key>', 'remove an annotation (repeatable)', (v: string, prev: string[] = []) => [...prev, v])
    .action(async (id: string, opts: { set?: [string, string][]; delete?: string[] }, cmd: Command) => {
      const annotations: Record<string, unknown> = {};
      for (const [k, v] of opts.set ?? []) annotations[k] = jsonOrString(v);
      for (const k of opts.delete ?? []) annotations[k] = null;
      if (Object.keys(annotations).length === 0) throw new UsageError('nothing to change: give --set key=value or --delete key');
      output(ctx, cmd).record(await clientFor(ctx, cmd).episodes.annotate(id, { annotations }));
    });
  episodes
    .command('outcome <episode-id> <outcome>')
    .description('override the outcome (success, failure, discarded); audited')
    .requiredOption('--reason <text>', 'why (kept in the outcome history)')
    .action(async (id: string, outcome: string, opts: { reason: string }, cmd: Command) => {
      const value = oneOf(['success', 'failure', 'discarded'] as const);
      let parsed: 'success' | 'failure' | 'discarded';
      try {
        parsed = value(outcome);
      } catch {
        throw new UsageError(`outcome must be success, failure or discarded`);
      }
      output(ctx, cmd).record(await clientFor(ctx, cmd).episodes.setOutcome(id, { outcome: parsed, reason: opts.reason }));
    });
  episodes
    .command('history <episode-id>')
    .description('who changed the outcome, when and why')
    .action(async (id: string, _o, cmd: Command) => {
      const res = await clientFor(ctx, cmd).episodes.outcomeHistory(id);
      output(ctx, cmd).list(res, res.outcome_history, [
        { header: 'at', value: (h) => h.at },
        { header: 'actor', value: (h) => h.actor },
        { header: 'from', value: (h) => h.from },
        { header: 'to', value: (h) => h.to },
        { header: 'reason', value: (h) => h.reason },
      ]);
    });
  episodes
    .command('read-links <episode-id>')
    .description('short-lived GET URLs for the episode’s files in your bucket, issued by your grant provider; prints the JSON answer')
    .option('--destination <id>', 'read the replica at this destination (default: the first verified one)')
    .option('--file <path>', `only this manifest file (repeatable, at most ${READ_LINKS_MAX_FILES}; default: every file)`, (v: string, prev: string[] = []) => [...prev, v])
    .addHelpText(
      'after',
      `
Examples:
  $ fleet episodes read-links ep_123
  $ fleet episodes read-links ep_123 --file recording.mcap | jq -r '.files[0].url'

Each URL is a bearer secret until its expires_at: anyone holding it can read the file. Ask
again for fresh ones; nothing is kept.`,
    )
    .action(async (id: string, opts: { destination?: string; file?: string[] }, cmd: Command) => {
      if (opts.file && opts.file.length > READ_LINKS_MAX_FILES) throw new UsageError(`at most ${READ_LINKS_MAX_FILES} --file per call (${opts.file.length} given)`);
      const body = { ...(opts.destination !== undefined ? { destination_id: opts.destination } : {}), ...(opts.file ? { files: opts.file } : {}) };
      // JSON whatever the output form: the links are for a program (curl, jq), and a table would cut them.
      output(ctx, cmd).data(await clientFor(ctx, cmd).episodes.readLinks(id, body));
    });
  withFilters(
    episodes
      .command('export')
      .description('every matching episode with its files and locations as NDJSON, to stdout or into a file (--out: resumable, the cursor is kept in FILE.cursor)')
      .option('--out <file>', 'the NDJSON file to write (default: stdout)')
      .option('--resume', 'with --out: continue an interrupted export of the same filters into the same file')
      .addOption(
        new Option('--page-size <n>', `episodes per request (1-${STREAM_PAGE_LIMIT.max}, default ${STREAM_PAGE_LIMIT.default})`).argParser(intIn(1, STREAM_PAGE_LIMIT.max)),
      )
      .addHelpText(
        'after',
        `
Examples:
  $ fleet episodes export --task-id pick --out pick.ndjson
  $ fleet episodes export --task-id pick --out pick.ndjson --resume   # after an interruption
  $ fleet episodes export --outcome failure                         # NDJSON to stdout

Each line is an episode with its files and locations. Without --out the lines go to stdout (and
the summary to stderr). With --out, while it runs, FILE.cursor holds the next page's cursor and
how much of FILE is complete; --resume (same filters) cuts FILE back to that and continues. A
progress line is drawn on stderr when it is a terminal.`,
      ),
  ).action(async (opts: FilterOpts & { out?: string; resume?: boolean; pageSize?: number }, cmd: Command) => {
    const out = output(ctx, cmd);
    const res = await exportEpisodes(clientFor(ctx, cmd), {
      ...(opts.out !== undefined ? { out: opts.out } : { stdout: ctx.stdout }),
      filters: filtersOf(opts),
      resume: opts.resume === true,
      ...(opts.pageSize !== undefined ? { pageSize: opts.pageSize } : {}),
      // No progress line between lines of data printed on the same terminal.
      progress: ctx.stderr.isTTY && !out.json && (opts.out !== undefined || !ctx.stdout.isTTY) ? ctx.stderr : null,
    });
    // On stdout the lines are the data: the summary goes to stderr.
    if (res.out === null) out.note(`fleet: exported ${res.episodes} episodes (${res.bytes} bytes)`);
    else out.done(`exported ${res.episodes} episodes (${res.bytes} bytes) to ${res.out}`, { ...res });
  });

  const datasets = program.command('datasets').description('saved episode filters and their frozen snapshots');
  datasets
    .command('create')
    .description('a live dataset from an episode filter')
    .requiredOption('--name <name>', 'dataset name')
    .option('--description <text>', 'free text')
    .option('--filter <key=value>', 'an episode list filter, e.g. task_id=pick or metadata.site=lab (repeatable)', pair)
    .action(async (opts: { name: string; description?: string; filter?: [string, string][] }, cmd: Command) => {
      const filter = Object.fromEntries(opts.filter ?? []);
      output(ctx, cmd).record(await clientFor(ctx, cmd).datasets.create({ name: opts.name, ...(opts.description ? { description: opts.description } : {}), filter }));
    });
  datasets
    .command('list')
    .description('every dataset')
    .action(async (_o, cmd: Command) => {
      const all: Dataset[] = [];
      for await (const d of clientFor(ctx, cmd).datasets.iterate({ limit: 100 })) all.push(d);
      output(ctx, cmd).list({ datasets: all }, all, DATASET_COLUMNS);
    });
  datasets
    .command('get <dataset-id>')
    .description('one dataset')
    .action(async (id: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).datasets.get(id)));
  datasets
    .command('snapshot <dataset-id>')
    .description('freeze the members the filter matches now')
    .action(async (id: string, _o, cmd: Command) => output(ctx, cmd).record(await clientFor(ctx, cmd).datasets.snapshot(id)));
  datasets
    .command('manifest <dataset-id>')
    .description('a snapshot’s manifest as NDJSON (header line, then one line per member), to stdout or --out')
    .option('--out <file>', 'write to this file instead of stdout')
    .action(async (id: string, opts: { out?: string }, cmd: Command) => {
      const sink = opts.out ? createWriteStream(opts.out) : ctx.stdout;
      let lines = 0;
      for await (const line of clientFor(ctx, cmd).datasets.manifest(id)) {
        if (!sink.write(`${JSON.stringify(line.kind === 'header' ? line.header : line.episode)}\n`)) await once(sink, 'drain');
        lines++;
      }
      if (opts.out) {
        sink.end();
        await once(sink, 'finish');
        output(ctx, cmd).done(`wrote ${lines} lines to ${opts.out}`, { out: opts.out, lines });
      }
    });
  registerLeRobot(datasets, ctx);
}
