import { once } from 'node:events';
import type { Command } from 'commander';
import { EVENT_ID_PATTERN, STREAM_EVENT_TYPES } from '@fleet/protocol';
import type { FleetEvent, FleetEventType } from '../events.js';
import { UsageError } from './errors.js';
import { clientFor, globals, list, type CliContext } from './context.js';
import { padToWidth, printable } from './output.js';

const clean = printable;

/** One readable line per event: when it arrived, its id and type, then what changed. */
export function formatEventLine(e: FleetEvent, at: Date): string {
  const head = `${at.toISOString()}  ${e.id}  ${padToWidth(e.type, 17)}`;
  if (e.type === 'robot.status') {
    const d = e.data;
    return `${head}  ${clean(d.robot_id)}  ${d.online ? 'online' : 'offline'}  ${clean(d.recording_state ?? '-')}`;
  }
  const d = e.data;
  const parts = [clean(d.episode_id), `robot ${clean(d.robot_id)}`, `state ${clean(d.state)}`];
  if (d.destination_id) parts.push(`destination ${clean(d.destination_id)}`);
  if (d.error) parts.push(`error ${clean(d.error.code)}: ${clean(d.error.message)}`);
  if (d.test) parts.push('(test)');
  return `${head}  ${parts.join('  ')}`;
}

export function registerEvents(program: Command, ctx: CliContext): void {
  const events = program.command('events').description('the organization’s event log, live');
  events
    .command('tail')
    .description('print events as they happen (like `stripe listen`): a line each, or NDJSON with --json; reconnects by itself, Ctrl-C stops')
    .option('--type <type>', `only this type (repeatable or comma-separated): ${STREAM_EVENT_TYPES.join(', ')}`, list)
    .option('--robot <robot-id>', "only this robot's events")
    .option('--since <event-id>', 'first every event after this one (its evt_… id), then live ones')
    .addHelpText(
      'after',
      `
Examples:
  $ fleet events tail
  $ fleet events tail --type robot.status --robot rbt_123
  $ fleet events tail --type episode.finalized,episode.verified --json
  $ fleet events tail --since evt_k5vq…     # what happened after that event, then live

Without --type, every event the key may read: episode events with data:read, robot.status with
robots:read or fleet:read. Each line starts with the time it arrived and the event id; --since
takes an id to resume from after an interruption. Connection notes go to stderr.`,
    )
    .action(async (opts: { type?: string[]; robot?: string; since?: string }, cmd: Command) => {
      const bad = opts.type?.find((t) => !(STREAM_EVENT_TYPES as readonly string[]).includes(t));
      if (bad !== undefined) throw new UsageError(`unknown event type '${bad.slice(0, 64)}': one of ${STREAM_EVENT_TYPES.join(', ')}`);
      if (opts.since !== undefined && !EVENT_ID_PATTERN.test(opts.since)) throw new UsageError(`--since takes an event id (evt_…, as a line of this command shows it), not '${opts.since.slice(0, 64)}'`);
      const json = globals(cmd).json === true;
      const note = (text: string) => ctx.stderr.write(`${text}\n`);
      let opened = 0;
      const stream = clientFor(ctx, cmd).events.stream({
        ...(opts.type ? { types: [...new Set(opts.type)] as FleetEventType[] } : {}),
        ...(opts.robot !== undefined ? { robotId: opts.robot } : {}),
        ...(opts.since !== undefined ? { lastEventId: opts.since } : {}),
        onOpen: () => note(opened++ === 0 ? 'fleet: listening for events (Ctrl-C to stop)' : 'fleet: reconnected'),
        onReconnect: ({ waitMs, lastEventId, error }) =>
          note(`fleet: connection lost (${error instanceof Error ? error.message : String(error)}); reconnecting in ${(waitMs / 1000).toFixed(1)} s${lastEventId ? ` after ${lastEventId}` : ''}`),
      });
      for await (const e of stream) {
        const line = json ? JSON.stringify(e) : formatEventLine(e, new Date());
        if (!ctx.stdout.write(`${line}\n`)) await once(ctx.stdout, 'drain');
      }
    });
}
