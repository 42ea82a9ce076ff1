import { useState } from 'preact/hooks';
import { FleetApiError, type Robot, type RobotCommandAction } from '@fleet/client';
import { useConsole } from '../ui/context.js';
import { useAction } from '../ui/hooks.js';
import { Confirm, ErrorNotice, ScopedButton } from '../ui/components.js';
import { can, needs, type Session } from '../session.js';

interface CommandDef {
  action: Exclude<RobotCommandAction, `episodes/${string}`>;
  label: string;
  /** Moves the robot: asks for confirmation first. */
  motion?: string;
}

/** Every non-episode command of the API (docs/api.md, Robot commands). */
export const COMMANDS: readonly CommandDef[] = [
  { action: 'go-home', label: 'Go home', motion: 'The robot drives to its home position.' },
  { action: 'go-to-start', label: 'Go to start', motion: 'The robot drives to its start position.' },
  { action: 'start-autonomous', label: 'Start autonomous', motion: 'The robot starts acting on its own policy.' },
  { action: 'stop-autonomous', label: 'Stop autonomous' },
  { action: 'stack/start', label: 'Start stack' },
  { action: 'stack/stop', label: 'Stop stack' },
  { action: 'stack/status', label: 'Stack status' },
];

/** Why a robot's actions are off, or null when the key, the plan and the robot allow them. */
export function commandBlock(session: Session, robot: Robot | null, feature: 'api.robot_commands' | 'data.metadata'): string | null {
  if (!can(session, 'robots:command')) return needs('robots:command');
  if (session.features[feature] === false) return `your plan does not include ${feature}`;
  if (robot?.deenrolled_at) return 'the robot was de-enrolled';
  return null;
}

/** An answer a retry may change: the robot was offline, or did not answer in time (it may still act). */
export function isTransient(err: unknown): boolean {
  return err instanceof FleetApiError && (err.code === 'robot_offline' || err.code === 'command_timeout');
}

/** The robot's fields of a command result, without the ones every result repeats. */
export function resultFields(result: Record<string, unknown>): string {
  const { cmd_id: _c, command: _cmd, robot_id: _r, ok: _o, ...rest } = result;
  return Object.keys(rest).length === 0 ? '' : JSON.stringify(rest, null, 2);
}

export function RobotCommands({ id, robot }: { id: string; robot: Robot | null }) {
  const { session } = useConsole();
  const block = commandBlock(session, robot, 'api.robot_commands');
  // The Idempotency-Key is the command id the robot remembers: a retry after a timeout reuses it.
  const [last, setLast] = useState<{ def: CommandDef; key: string } | null>(null);
  const [confirm, setConfirm] = useState<CommandDef | null>(null);
  const act = useAction((action: CommandDef['action'], key: string) => session.client.robots.command(id, action, undefined, { idempotencyKey: key }));
  const send = (def: CommandDef, key: string = crypto.randomUUID()) => {
    setLast({ def, key });
    void act.run(def.action, key);
  };
  const result: Record<string, unknown> | undefined = act.result?.result;
  const declined = result?.ok === false ? (result.error as { code?: string; message?: string } | undefined) : undefined;
  const fields = result && !declined ? resultFields(result) : '';

  return (
    <section class="panel" aria-labelledby="robot-commands-h">
      <h2 id="robot-commands-h">Commands</h2>
      {robot && !robot.connected && !robot.deenrolled_at ? <p class="muted small">The robot is offline: a command answers robot_offline until it reconnects.</p> : null}
      <div class="robot-command-buttons">
        {COMMANDS.map((def) => (
          <ScopedButton
            key={def.action}
            allowed={block === null}
            why={block ?? ''}
            disabled={act.busy}
            onClick={() => (def.motion ? setConfirm(def) : send(def))}
          >
            {def.label}
          </ScopedButton>
        ))}
      </div>
      {block ? <p class="muted small">Commands: {block}.</p> : null}
      <div aria-live="polite" class="robot-command-result">
        {act.busy && last ? <p class="muted" role="status">Sending {last.def.label}… (the robot has up to 10 s to answer)</p> : null}
        {last && result && !act.busy ? (
          declined ? (
            <div class="notice warn" role="status">
              <strong>
                The robot declined {last.def.label}: {declined.code}
              </strong>
              <p>{declined.message}</p>
              <p class="muted small">
                command id <code>{typeof result.cmd_id === 'string' ? result.cmd_id : last.key}</code>
              </p>
            </div>
          ) : (
            <div class="notice info" role="status">
              <strong>{last.def.label}: done</strong>
              {fields ? <pre class="robot-result">{fields}</pre> : null}
              <p class="muted small">
                command id <code>{typeof result.cmd_id === 'string' ? result.cmd_id : last.key}</code>
              </p>
            </div>
          )
        ) : null}
        {last && act.error ? (
          <div>
            <ErrorNotice error={act.error} action={last.def.label} />
            {isTransient(act.error) ? (
              <button type="button" onClick={() => send(last.def, last.key)} disabled={act.busy}>
                Send {last.def.label} again (same command id)
              </button>
            ) : null}
          </div>
        ) : null}
      </div>
      {/* Mounted only while open: the page's dialogs share the Confirm's element ids. */}
      {confirm ? (
        <Confirm
          open
          title={`${confirm.label}?`}
          confirmLabel={confirm.label}
          onCancel={() => setConfirm(null)}
          onConfirm={() => {
            setConfirm(null);
            send(confirm);
          }}
        >
          <p>
            {confirm.motion} Make sure the space around {robot ? <strong>{robot.name}</strong> : 'the robot'} is clear.
          </p>
        </Confirm>
      ) : null}
    </section>
  );
}
