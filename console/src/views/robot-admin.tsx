import { useState } from 'preact/hooks';
import type { Robot } from '@fleet/client';
import { useConsole } from '../ui/context.js';
import { useAction } from '../ui/hooks.js';
import { Confirm, ErrorNotice, ScopedButton } from '../ui/components.js';
import { formatTime } from '../ui/format.js';
import { can, needs } from '../session.js';

/**
 * Credential rotation and de-enrollment (scope admin). Rotation answers `completed` when the
 * robot stored its new secret, `pending` while it is offline; de-enrollment is typed-confirmed
 * with the robot's name and cannot be undone.
 */
export function RobotAdmin({ id, robot, onChanged }: { id: string; robot: Robot | null; onChanged: () => void }) {
  const { session } = useConsole();
  const admin = can(session, 'admin');
  const gone = Boolean(robot?.deenrolled_at);
  const why = !admin ? needs('admin') : 'the robot was de-enrolled';
  const rotate = useAction(async () => {
    const r = await session.client.robots.rotateCredentials(id);
    onChanged();
    return r;
  });
  const deenroll = useAction(async () => {
    await session.client.robots.deenroll(id);
    onChanged();
    return true;
  });
  const [confirming, setConfirming] = useState(false);
  const name = robot?.name ?? id;

  return (
    <section class="panel robot-admin" aria-labelledby="robot-admin-h">
      <h2 id="robot-admin-h">Administration</h2>
      <div class="robot-admin-actions">
        <div>
          <ScopedButton allowed={admin && !gone} why={why} disabled={rotate.busy} onClick={() => void rotate.run()}>
            {rotate.busy ? 'Rotating credentials…' : 'Rotate credentials'}
          </ScopedButton>
          <p class="muted small">A new broker secret goes to the robot over its command channel; its old one works until it has stored the new one.</p>
        </div>
        <div>
          <ScopedButton class="danger" allowed={admin && !gone} why={why} disabled={deenroll.busy} onClick={() => setConfirming(true)}>
            De-enroll
          </ScopedButton>
          <p class="muted small">Immediate and permanent: the robot is disconnected and its credentials refused. Its record and episodes stay.</p>
        </div>
      </div>
      {!admin ? <p class="muted small">Administration: {needs('admin')}.</p> : null}
      <div aria-live="polite">
        {rotate.result ? (
          rotate.result.state === 'completed' ? (
            <div class="notice info" role="status">
              <strong>Rotation completed</strong>
              <p>The robot stored its new secret{rotate.result.rotated_at ? ` at ${formatTime(rotate.result.rotated_at)}` : ''}; the old one is refused from now on.</p>
            </div>
          ) : (
            <div class="notice warn" role="status">
              <strong>Rotation pending</strong>
              <p>
                The robot is offline or did not answer in time (asked {formatTime(rotate.result.requested_at)}). It gets the new secret when it next connects; its old secret works until then.
              </p>
            </div>
          )
        ) : null}
        <ErrorNotice error={rotate.error} action="Rotating the credentials" />
        {deenroll.result ? (
          <div class="notice info" role="status">
            <strong>{name} is de-enrolled.</strong>
          </div>
        ) : null}
        <ErrorNotice error={deenroll.error} action="De-enrolling" />
      </div>
      {confirming ? (
        <Confirm
          open
          danger
          title="De-enroll this robot?"
          confirmLabel="De-enroll"
          typed={name}
          onCancel={() => setConfirming(false)}
          onConfirm={() => {
            setConfirming(false);
            void deenroll.run();
          }}
        >
          <p>
            <strong>{name}</strong> (<code>{id}</code>) is disconnected at once and can never connect again with its credentials. This cannot be undone: to use the machine again, enroll it anew (it gets a new id).
          </p>
        </Confirm>
      ) : null}
    </section>
  );
}
