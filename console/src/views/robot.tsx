import { useEffect, useRef, useState } from 'preact/hooks';
import { FleetApiError, type Robot, type SyncHealthRow } from '@fleet/client';
import { useConsole, useLiveEvent } from '../ui/context.js';
import { useAsync, useTicker } from '../ui/hooks.js';
import { ErrorNotice, Facts, Link, Loading, PageHeader, Pill } from '../ui/components.js';
import { formatBytes, formatHoursToFull, formatTime, timeAgo } from '../ui/format.js';
import { can, needs } from '../session.js';
import { WEBHOOK_EVENTS as EPISODE_EVENTS } from '@fleet/protocol/browser';
import { applyStatus, robotStatusOf } from '../ui/fleet-query.js';
import { Capabilities, PresencePill, pressureTone, RecordingPill } from './fleet-parts.js';
import { RobotCommands } from './robot-commands.js';
import { RecentEpisodes, EpisodeVerbs } from './robot-episodes.js';
import { RobotAdmin } from './robot-admin.js';


/**
 * One robot: its live status and facts, every command of the API, the episode verbs with a
 * metadata form, its recent episodes and sync health, and (admin) credential rotation and
 * de-enrollment. Each part is loaded only when the key may read it, and each action is disabled,
 * naming the scope, when the key may not use it.
 */
export function RobotView({ id }: { id: string }) {
  const { session } = useConsole();
  const readRobot = can(session, ['robots:read', 'fleet:read']);
  const readData = can(session, 'data:read');
  const loaded = useAsync(async (signal) => (readRobot ? session.client.robots.get(id, { signal }) : null), [id, readRobot]);

  // The robot as shown: as loaded, with the statuses the stream brought since.
  const [robot, setRobot] = useState<Robot | null>(null);
  useEffect(() => setRobot(loaded.data ?? null), [loaded.data]);
  useLiveEvent(['robot.status'], (e) => {
    const s = robotStatusOf(e.data);
    if (s && s.robot_id === id) setRobot((r) => (r ? applyStatus(r, s) : r));
  });
  // A verb's answer says the robot's new recording state before its status event does.
  const noteRecordingState = (state: Robot['recording_state']) => setRobot((r) => (r ? { ...r, recording_state: state } : r));

  // Episodes and sync health of this robot are read again when one of its episodes moves.
  const [episodeTick, setEpisodeTick] = useState(0);
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  useEffect(() => () => void (timer.current && clearTimeout(timer.current)), []);
  useLiveEvent(readData ? EPISODE_EVENTS : [], (e) => {
    if (e.data.robot_id !== id || timer.current) return;
    timer.current = setTimeout(() => {
      timer.current = null;
      setEpisodeTick((t) => t + 1);
    }, 250);
  });

  const now = useTicker(1000);
  const notFound = loaded.error instanceof FleetApiError && loaded.error.code === 'not_found';
  const title = robot?.name ?? (notFound ? 'Robot not found' : 'Robot');

  return (
    <section class="robot">
      <p class="robot-back">
        <Link to="/fleet">← Fleet</Link>
      </p>
      <PageHeader title={title}>
        {robot ? (
          <span class="robot-header-status">
            <PresencePill robot={robot} now={now} /> {robot.recording_state ? <RecordingPill state={robot.recording_state} /> : null}
          </span>
        ) : null}
      </PageHeader>
      <p class="muted robot-id">
        Robot id <code>{id}</code>
      </p>
      {notFound ? (
        <div class="notice error" role="alert">
          <strong>No robot {id} in your organization.</strong>
          <p>
            It may have been enrolled in another organization, or the link is wrong. <Link to="/fleet">Back to the fleet</Link>
          </p>
        </div>
      ) : (
        <ErrorNotice error={loaded.error} action="Loading the robot" />
      )}
      {loaded.error && !notFound ? (
        <button type="button" onClick={() => loaded.reload()}>
          Try again
        </button>
      ) : null}
      {!readRobot ? (
        <p class="notice info">
          This key cannot read robot records ({needs(['robots:read', 'fleet:read'])}): the robot's status and facts are not shown.
        </p>
      ) : null}
      {robot?.deenrolled_at ? (
        <div class="notice warn" role="status">
          <strong>De-enrolled {formatTime(robot.deenrolled_at)}.</strong>
          <p>It can no longer connect or take commands; its record and episodes stay. To bring the machine back, enroll it again: it gets a new id.</p>
        </div>
      ) : null}
      {readRobot && loaded.data === undefined && !loaded.error ? <Loading label="Loading the robot" /> : null}
      {robot ? <RobotFacts robot={robot} now={now} /> : null}
      {notFound ? null : (
        <>
          <div class="grid-2 robot-actions">
            <RobotCommands id={id} robot={robot} />
            <EpisodeVerbs id={id} robot={robot} onRecordingState={noteRecordingState} />
          </div>
          {readData ? (
            <div class="grid-2">
              <RecentEpisodes id={id} tick={episodeTick} />
              <HealthPanel id={id} tick={episodeTick} />
            </div>
          ) : (
            <p class="muted">Episodes and sync health of this robot: {needs('data:read')}.</p>
          )}
          <RobotAdmin id={id} robot={robot} onChanged={() => loaded.reload()} />
        </>
      )}
    </section>
  );
}

function RobotFacts({ robot, now }: { robot: Robot; now: number }) {
  const c = robot.credentials;
  return (
    <section class="panel" aria-labelledby="robot-facts-h">
      <h2 id="robot-facts-h">Status and facts</h2>
      <Facts
        items={[
          ['Status', <PresencePill robot={robot} now={now} />],
          ['Recording state', <RecordingPill state={robot.recording_state} />],
          ['Last seen', robot.last_seen_at ? <time dateTime={robot.last_seen_at} title={formatTime(robot.last_seen_at)}>{robot.connected ? 'now (connected)' : timeAgo(robot.last_seen_at, now)}</time> : 'never'],
          ['Platform', robot.platform ?? <span class="muted">not announced</span>],
          ['Runtime version', robot.runtime_version ?? <span class="muted">not announced</span>],
          ['Capabilities', <Capabilities list={robot.capabilities} />],
          ['Enrolled', <time dateTime={robot.created_at}>{formatTime(robot.created_at)}</time>],
          [
            'Credentials',
            c.rotation === 'pending' ? (
              <span>
                <Pill tone="warn">rotation pending</Pill> <span class="muted small">since {formatTime(c.rotation_requested_at)}; completes when the robot next connects</span>
              </span>
            ) : (
              <span>
                <Pill tone="idle">no rotation pending</Pill> <span class="muted small">{c.rotated_at ? `last rotated ${formatTime(c.rotated_at)}` : 'never rotated'}</span>
              </span>
            ),
          ],
          ...(robot.deenrolled_at ? ([['De-enrolled', formatTime(robot.deenrolled_at)]] as [string, string][]) : []),
        ]}
      />
    </section>
  );
}

function HealthPanel({ id, tick }: { id: string; tick: number }) {
  const { session } = useConsole();
  const h = useAsync(async (signal): Promise<SyncHealthRow | null> => (await session.client.syncHealth({ robotIds: [id], signal })).robots[0] ?? null, [id, tick]);
  const row = h.data;
  const p = row?.pressure;
  const tone = pressureTone(p?.hours_to_full);
  return (
    <section class="panel" aria-labelledby="robot-health-h">
      <h2 id="robot-health-h">Sync health</h2>
      <ErrorNotice error={h.error} action="Loading sync health" />
      {h.data === undefined && !h.error ? <Loading label="Loading sync health" /> : null}
      {h.data === null ? <p class="empty">No sync-health row for this robot.</p> : null}
      {row ? (
        <>
          {row.unverified_over_72h > 0 ? (
            <div class="notice error" role="alert">
              <strong>{row.unverified_over_72h.toLocaleString()} episodes unverified for more than 72 hours.</strong>
              <p>They have reached no destination; check the robot's connectivity and the <Link to="/sync">sync</Link> page.</p>
            </div>
          ) : null}
          <Facts
            items={[
              ['Episodes reported', row.episodes_reported.toLocaleString()],
              ['Unverified', `${row.unverified.toLocaleString()} (${formatBytes(row.bytes_unverified)})`],
              ['Unverified over 72 h', row.unverified_over_72h > 0 ? <Pill tone="bad">{row.unverified_over_72h.toLocaleString()}</Pill> : '0'],
              ['Local files missing', row.local_missing > 0 ? <Pill tone="warn">{row.local_missing.toLocaleString()}</Pill> : '0'],
              [
                'Disk',
                p ? (
                  <span>
                    {tone ? <Pill tone={tone}>{formatHoursToFull(p.hours_to_full)}{p.hours_to_full === null ? '' : ' to full'}</Pill> : <span>{formatHoursToFull(p.hours_to_full)}{p.hours_to_full === null ? '' : ' to full'}</span>}
                    <span class="muted small">
                      {' '}
                      {formatBytes(p.free_bytes)} free, {formatBytes(p.backlog_bytes)} waiting to sync; reported {formatTime(p.reported_at)}
                    </span>
                  </span>
                ) : (
                  <span class="muted">no report yet</span>
                ),
              ],
            ]}
          />
        </>
      ) : null}
    </section>
  );
}
