import type { LightMyRequestResponse } from 'fastify';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CommandReply, RobotCommandName } from '@fleet/protocol';
import { ApiError } from '../../errors.js';
import { hashSecret } from '../../ids.js';
import { CredentialRotator, type BrokerSessions } from '../../robots/credentials.js';
import { createEnrollmentToken, enrollRobot } from '../../robots/enrollment.js';
import { SecretBox } from '../../secret-box.js';
import { bearer, errorCode, errorDetails, startTestCloud, type TestCloud, type TestTenant } from '../../test-support.js';

/** Stands in for the MQTT link: records what is sent and answers as `answer` says. */
class ScriptedLink {
  sent: { robotId: string; command: RobotCommandName; args: Record<string, unknown> | undefined }[] = [];
  answer: (cmdId: string) => CommandReply | Promise<CommandReply> = (cmdId) => ({ cmd_id: cmdId, ok: true, result: { rotated: true } });

  async send(robotId: string, command: RobotCommandName, cmdId: string, args?: Record<string, unknown>): Promise<CommandReply> {
    this.sent.push({ robotId, command, args });
    return await this.answer(cmdId);
  }
}

class RecordingSessions implements BrokerSessions {
  closed: string[] = [];
  disconnect(robotId: string): boolean {
    this.closed.push(robotId);
    return true;
  }
}

let t: TestCloud;
let tenant: TestTenant;
let link: ScriptedLink;
let sessions: RecordingSessions;
let robotId: string;
const secrets = SecretBox.random();

beforeEach(async () => {
  link = new ScriptedLink();
  sessions = new RecordingSessions();
  // The rotator needs the store and clock the test cloud makes: it reads them through this holder.
  const holder: { rotator?: CredentialRotator } = {};
  t = await startTestCloud({
    deps: {
      secrets,
      fleet: { rotate: (id) => holder.rotator!.rotate(id), disconnect: (id) => holder.rotator!.disconnect(id) },
    },
  });
  holder.rotator = new CredentialRotator({ store: t.store, clock: t.clock, secrets, link, sessions, logger: pino({ level: 'silent' }) });
  tenant = await t.createTenant();
  const { token } = await createEnrollmentToken(t.store, t.clock, { org: tenant.org, createdBy: 'test' });
  robotId = (await enrollRobot(t.store, t.clock, { token, name: 'r1' }, ['mqtt://localhost:1883'])).robot_id;
  await t.store.robots.updateStatus(robotId, { connected: true, seenAt: t.clock.now() });
});
afterEach(async () => {
  await t.close();
});

function inject(method: 'GET' | 'POST' | 'DELETE', url: string, headers: Record<string, string> = tenant.auth): Promise<LightMyRequestResponse> {
  return t.app.inject({ method, url, headers });
}

describe('GET and DELETE /v1/robots/enrollment-tokens', () => {
  it('lists without the secret, validates its query, needs admin, and revokes within the organization only', async () => {
    const made = await createEnrollmentToken(t.store, t.clock, { org: tenant.org, createdBy: 'test', namePrefix: 'arm' });
    const res = await inject('GET', '/v1/robots/enrollment-tokens');
    expect(res.statusCode).toBe(200);
    expect(res.payload).not.toContain(made.token);
    const listed = res.json<{ enrollment_tokens: Record<string, unknown>[]; cursor: null }>().enrollment_tokens.find((x) => x.id === made.id);
    expect(listed).toEqual({
      id: made.id,
      token_prefix: made.token.slice(0, 12),
      name_prefix: 'arm',
      max_uses: 1,
      uses: 0,
      expires_at: made.expires_at,
      created_at: made.created_at,
      revoked_at: null,
    });
    for (const q of ['limit=0', 'limit=101', 'cursor=%25%25', 'token=x']) expect(errorCode(await inject('GET', `/v1/robots/enrollment-tokens?${q}`)), q).toBe('validation_failed');
    const reader = await t.createKey(tenant.org, ['robots:read', 'fleet:read']);
    expect(errorCode(await inject('GET', '/v1/robots/enrollment-tokens', bearer(reader.key)))).toBe('insufficient_scope');
    expect(errorCode(await inject('DELETE', `/v1/robots/enrollment-tokens/${made.id}`, bearer(reader.key)))).toBe('insufficient_scope');

    const stranger = await t.createTenant();
    expect(errorCode(await inject('DELETE', `/v1/robots/enrollment-tokens/${made.id}`, stranger.auth))).toBe('not_found');
    expect((await inject('DELETE', `/v1/robots/enrollment-tokens/${made.id}`)).statusCode).toBe(204);
    expect(errorCode(await inject('DELETE', '/v1/robots/enrollment-tokens/ret_nope'))).toBe('not_found');
    await expect(enrollRobot(t.store, t.clock, { token: made.token }, ['mqtt://x'])).rejects.toMatchObject({ code: 'unauthenticated' });
  });
});

describe('DELETE /v1/robots/{id}', () => {
  it('de-enrolls: the broker session is closed, commands and rotations answer 409 robot_deenrolled, the record stays', async () => {
    const stranger = await t.createTenant();
    expect(errorCode(await inject('DELETE', `/v1/robots/${robotId}`, stranger.auth))).toBe('not_found');
    expect(sessions.closed).toEqual([]);
    expect((await inject('DELETE', `/v1/robots/${robotId}`)).statusCode).toBe(204);
    expect(sessions.closed).toEqual([robotId]);
    const robot = await inject('GET', `/v1/robots/${robotId}`);
    expect(robot.json()).toMatchObject({ id: robotId, connected: false, deenrolled_at: new Date(t.clock.now()).toISOString() });
    expect((await inject('GET', '/v1/robots')).json<{ robots: unknown[] }>().robots).toEqual([]);
    expect((await inject('GET', '/v1/robots?include_deenrolled=true')).json<{ robots: { id: string }[] }>().robots.map((r) => r.id)).toEqual([robotId]);
    expect(errorCode(await inject('GET', '/v1/robots?include_deenrolled=yes'))).toBe('validation_failed');

    const cmd = await inject('POST', `/v1/robots/${robotId}/go-home`);
    expect([cmd.statusCode, errorCode(cmd)]).toEqual([409, 'robot_deenrolled']);
    expect(errorDetails(cmd)).toMatchObject({ robot_id: robotId });
    const rot = await inject('POST', `/v1/robots/${robotId}/rotate-credentials`);
    expect([rot.statusCode, errorCode(rot)]).toEqual([409, 'robot_deenrolled']);
    expect(link.sent).toEqual([]);
    expect(errorCode(await inject('DELETE', '/v1/robots/rbt_unknown'))).toBe('not_found');
  });
});

describe('POST /v1/robots/{id}/rotate-credentials', () => {
  it('a connected robot: the secret goes over its command channel, its hash replaces the old one, the session is closed', async () => {
    const res = await inject('POST', `/v1/robots/${robotId}/rotate-credentials`);
    expect(res.statusCode, res.payload).toBe(200);
    expect(res.json()).toMatchObject({ robot_id: robotId, state: 'completed', rotated_at: new Date(t.clock.now()).toISOString() });
    expect(link.sent).toHaveLength(1);
    expect(link.sent[0]).toMatchObject({ robotId, command: 'credentials.rotate' });
    const password = String(link.sent[0]!.args?.password);
    expect(password).toMatch(/^rsec_[A-Za-z0-9_-]{40,}$/);
    expect(res.payload).not.toContain(password);
    expect(await t.store.robots.getById(robotId)).toMatchObject({ mqttPasswordHash: hashSecret(password), pendingPasswordHash: null, pendingSecretSealed: null });
    expect(sessions.closed).toEqual([robotId]);
    expect((await inject('GET', `/v1/robots/${robotId}`)).json()).toMatchObject({ credentials: { rotation: 'none', rotation_requested_at: null } });
  });

  it('no answer: pending, the old secret kept, and the next attempt sends the same secret again', async () => {
    const before = (await t.store.robots.getById(robotId))!.mqttPasswordHash;
    link.answer = () => {
      throw new ApiError('command_timeout', 'no answer');
    };
    const first = await inject('POST', `/v1/robots/${robotId}/rotate-credentials`);
    expect([first.statusCode, first.json<{ state: string }>().state]).toEqual([202, 'pending']);
    expect(await t.store.robots.getById(robotId)).toMatchObject({ mqttPasswordHash: before, pendingPasswordHash: hashSecret(String(link.sent[0]!.args?.password)) });
    expect((await inject('GET', `/v1/robots/${robotId}`)).json()).toMatchObject({ credentials: { rotation: 'pending' } });
    expect(sessions.closed).toEqual([]);

    link.answer = (cmdId) => ({ cmd_id: cmdId, ok: true, result: {} });
    const second = await inject('POST', `/v1/robots/${robotId}/rotate-credentials`);
    expect(second.statusCode).toBe(200);
    expect(link.sent.map((s) => s.args?.password)).toEqual([link.sent[0]!.args?.password, link.sent[0]!.args?.password]);
    expect(second.json<{ requested_at: string }>().requested_at).toBe(first.json<{ requested_at: string }>().requested_at);
  });

  it('completed too when the robot reconnected with the new secret before its answer was read', async () => {
    link.answer = async (cmdId) => {
      const pending = (await t.store.robots.getById(robotId))!.pendingPasswordHash!;
      // What the broker's authentication does when the robot connects with the pending secret.
      await t.store.robots.completeRotation(robotId, pending, t.clock.now());
      return { cmd_id: cmdId, ok: true, result: {} };
    };
    const res = await inject('POST', `/v1/robots/${robotId}/rotate-credentials`);
    expect([res.statusCode, res.json<{ state: string }>().state]).toEqual([200, 'completed']);
    // Already on the new secret: no reason to drop that connection.
    expect(sessions.closed).toEqual([]);
  });

  it('an offline robot: 202 pending without sending anything; a robot that declines keeps it pending', async () => {
    await t.store.robots.updateStatus(robotId, { connected: false, seenAt: t.clock.now() });
    const res = await inject('POST', `/v1/robots/${robotId}/rotate-credentials`);
    expect([res.statusCode, res.json()]).toEqual([202, { robot_id: robotId, state: 'pending', requested_at: new Date(t.clock.now()).toISOString(), rotated_at: null }]);
    expect(link.sent).toEqual([]);

    await t.store.robots.updateStatus(robotId, { connected: true, seenAt: t.clock.now() });
    link.answer = (cmdId) => ({ cmd_id: cmdId, ok: false, error: { code: 'unsupported', message: 'old agent' } });
    expect((await inject('POST', `/v1/robots/${robotId}/rotate-credentials`)).statusCode).toBe(202);
    expect(link.sent).toHaveLength(1);
  });

  it('validates: no body fields, admin only, 404 for another organization', async () => {
    const withBody = await t.app.inject({ method: 'POST', url: `/v1/robots/${robotId}/rotate-credentials`, headers: tenant.auth, payload: { password: 'mine' } });
    expect(errorCode(withBody)).toBe('validation_failed');
    const commander = await t.createKey(tenant.org, ['robots:command']);
    expect(errorCode(await inject('POST', `/v1/robots/${robotId}/rotate-credentials`, bearer(commander.key)))).toBe('insufficient_scope');
    expect(errorCode(await inject('DELETE', `/v1/robots/${robotId}`, bearer(commander.key)))).toBe('insufficient_scope');
    const stranger = await t.createTenant();
    expect(errorCode(await inject('POST', `/v1/robots/${robotId}/rotate-credentials`, stranger.auth))).toBe('not_found');
    expect(link.sent).toEqual([]);
  });
});

describe('GET /v1/webhooks/{id}/deliveries', () => {
  it('validates its query and answers 404 for an unknown subscription', async () => {
    expect(errorCode(await inject('GET', '/v1/webhooks/wh_nope/deliveries'))).toBe('not_found');
    for (const q of ['limit=0', 'limit=1000', 'cursor=bm9wZQ', 'since=1']) expect(errorCode(await inject('GET', `/v1/webhooks/wh_nope/deliveries?${q}`)), q).toBe('validation_failed');
  });
});
