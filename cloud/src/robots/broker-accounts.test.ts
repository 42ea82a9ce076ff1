import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CommandReply, EnrollResponse, RobotCommandName } from '@fleet/protocol';
import { hashSecret } from '../ids.js';
import { SecretBox } from '../secret-box.js';
import { startTestCloud, type TestCloud, type TestTenant } from '../test-support.js';
import { CredentialRotator, type RobotBrokerAccounts } from './credentials.js';
import { createEnrollmentToken } from './enrollment.js';

/** Robot accounts on an external broker, recorded; `fail` makes the next call of that kind throw. */
class RecordingAccounts implements RobotBrokerAccounts {
  calls: [string, string, string?][] = [];
  fail = new Set<'enrolled' | 'rotated' | 'revoked'>();
  private check(kind: 'enrolled' | 'rotated' | 'revoked'): Promise<void> {
    if (!this.fail.delete(kind)) return Promise.resolve();
    return Promise.reject(new Error(`broker refused ${kind}`));
  }
  enrolled(robotId: string, password: string) {
    this.calls.push(['enrolled', robotId, password]);
    return this.check('enrolled');
  }
  rotated(robotId: string, password: string) {
    this.calls.push(['rotated', robotId, password]);
    return this.check('rotated');
  }
  revoked(robotId: string) {
    this.calls.push(['revoked', robotId]);
    return this.check('revoked');
  }
}

class ScriptedLink {
  sent: { robotId: string; command: RobotCommandName; args: Record<string, unknown> | undefined }[] = [];
  send(robotId: string, command: RobotCommandName, cmdId: string, args?: Record<string, unknown>): Promise<CommandReply> {
    this.sent.push({ robotId, command, args });
    return Promise.resolve({ cmd_id: cmdId, ok: true, result: {} });
  }
}

let t: TestCloud;
let tenant: TestTenant;
let accounts: RecordingAccounts;
let link: ScriptedLink;
const secrets = SecretBox.random();

beforeEach(async () => {
  accounts = new RecordingAccounts();
  link = new ScriptedLink();
  const holder: { rotator?: CredentialRotator } = {};
  t = await startTestCloud({
    deps: {
      secrets,
      fleet: {
        enrolled: (id, password) => holder.rotator!.enrolled(id, password),
        rotate: (id) => holder.rotator!.rotate(id),
        disconnect: (id) => holder.rotator!.disconnect(id),
      },
    },
  });
  holder.rotator = new CredentialRotator({ store: t.store, clock: t.clock, secrets, link, sessions: null, accounts, logger: pino({ level: 'silent' }) });
  tenant = await t.createTenant();
});
afterEach(async () => {
  await t.close();
});

async function enroll(): Promise<{ status: number; body: EnrollResponse }> {
  const { token } = await createEnrollmentToken(t.store, t.clock, { org: tenant.org, createdBy: 'test' });
  const res = await t.app.inject({ method: 'POST', url: '/v1/robots/enroll', payload: { token, name: 'r1' } });
  return { status: res.statusCode, body: res.json<EnrollResponse>() };
}

describe('robot accounts on an external broker (mosquitto)', () => {
  it('enrollment gives the broker the robot id and the secret it answers with', async () => {
    const { status, body } = await enroll();
    expect(status).toBe(201);
    expect(accounts.calls).toEqual([['enrolled', body.robot_id, body.mqtt.password]]);
  });

  it('an enrollment the broker refuses fails and leaves no usable robot behind', async () => {
    accounts.fail.add('enrolled');
    const { status } = await enroll();
    expect(status).toBe(500);
    const robotId = accounts.calls[0]![1];
    expect((await t.store.robots.getById(robotId))?.deenrolledAt).not.toBeNull();
  });

  it('an acknowledged rotation sets the new secret on the broker, then completes; a broker error keeps it pending with the old secret', async () => {
    const robotId = (await enroll()).body.robot_id;
    const oldHash = (await t.store.robots.getById(robotId))!.mqttPasswordHash;
    await t.store.robots.updateStatus(robotId, { connected: true, seenAt: t.clock.now() });

    accounts.fail.add('rotated');
    const pending = await t.app.inject({ method: 'POST', url: `/v1/robots/${robotId}/rotate-credentials`, headers: tenant.auth });
    expect(pending.statusCode).toBe(202);
    const sent = link.sent[0]!.args!.password as string;
    expect(accounts.calls.at(-1)).toEqual(['rotated', robotId, sent]);
    expect((await t.store.robots.getById(robotId))!.mqttPasswordHash).toBe(oldHash);

    const done = await t.app.inject({ method: 'POST', url: `/v1/robots/${robotId}/rotate-credentials`, headers: tenant.auth });
    expect(done.statusCode).toBe(200);
    // The same secret again (the robot may hold it), now on the broker and in the store.
    expect(link.sent[1]!.args!.password).toBe(sent);
    expect(accounts.calls.at(-1)).toEqual(['rotated', robotId, sent]);
    const after = (await t.store.robots.getById(robotId))!;
    expect(after.mqttPasswordHash).toBe(hashSecret(sent));
    expect(after.rotationRequestedAt).toBeNull();
  });

  it('de-enrollment disables the account; a DELETE repeated after a broker error tells the broker again', async () => {
    const robotId = (await enroll()).body.robot_id;
    accounts.fail.add('revoked');
    const failed = await t.app.inject({ method: 'DELETE', url: `/v1/robots/${robotId}`, headers: tenant.auth });
    expect(failed.statusCode).toBe(500);
    const again = await t.app.inject({ method: 'DELETE', url: `/v1/robots/${robotId}`, headers: tenant.auth });
    expect(again.statusCode).toBe(204);
    expect(accounts.calls.filter((c) => c[0] === 'revoked')).toEqual([['revoked', robotId], ['revoked', robotId]]);
  });
});
