import { stat } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { EnrollBodySchema } from '@fleet/protocol';
import { credentialsPath, readCredentials } from './credentials.js';
import { EnrollError } from './errors.js';
import { enroll } from './enroll.js';
import { fakeRobotId, makeTempDir, removeTempDirs } from './test-support.js';

afterEach(removeTempDirs);

function fakeApi(status: number, body: unknown) {
  const calls: { url: string; body: unknown }[] = [];
  const fetch = async (url: string, init: { body: string }) => {
    calls.push({ url, body: JSON.parse(init.body) as unknown });
    return { status, text: async () => (typeof body === 'string' ? body : JSON.stringify(body)) };
  };
  return { fetch, calls };
}

const answer = (robotId: string) => ({
  robot_id: robotId,
  name: 'arm-1',
  mqtt: { url: 'mqtt://cloud:1883', client_id: robotId, username: robotId, password: 'pw-secret', topic_prefix: `fleet/v1/robots/${robotId}/` },
});

describe('enroll', () => {
  it('posts the token, name, platform and runtime version, and stores the credentials with mode 0600', async () => {
    const dataDir = await makeTempDir();
    const id = fakeRobotId();
    const api = fakeApi(201, answer(id));
    const creds = await enroll({ api: 'http://cloud:8080/', token: 'ret_abc', name: 'arm-1', platform: 'ur5', runtimeVersion: '0.1.0', dataDir, fetch: api.fetch });
    expect(api.calls).toHaveLength(1);
    expect(api.calls[0]!.url).toBe('http://cloud:8080/v1/robots/enroll');
    expect(EnrollBodySchema.parse(api.calls[0]!.body)).toEqual({ token: 'ret_abc', name: 'arm-1', platform: 'ur5', runtime_version: '0.1.0' });
    expect(creds.robot_id).toBe(id);
    expect(await readCredentials(dataDir)).toEqual(creds);
    expect((await stat(credentialsPath(dataDir))).mode & 0o777).toBe(0o600);
  });

  it('stores an overriding broker address', async () => {
    const dataDir = await makeTempDir();
    const creds = await enroll({ api: 'http://c', token: 't', dataDir, mqttUrls: ['mqtt://10.0.0.5:1883'], fetch: fakeApi(200, answer(fakeRobotId())).fetch });
    expect(creds.mqtt.url).toBe('mqtt://10.0.0.5:1883');
    expect(creds.mqtt.urls).toEqual(['mqtt://10.0.0.5:1883']);
  });

  it("stores the cluster's nodes in the order the cloud gave them", async () => {
    const dataDir = await makeTempDir();
    const id = fakeRobotId();
    const base = answer(id);
    const urls = ['mqtt://node-b:1883', 'mqtt://node-c:1883', 'mqtt://node-a:1883'];
    const creds = await enroll({ api: 'http://c', token: 't', dataDir, fetch: fakeApi(200, { ...base, mqtt: { ...base.mqtt, url: urls[0], urls } }).fetch });
    expect(creds.mqtt).toMatchObject({ url: 'mqtt://node-b:1883', urls });
    expect((await readCredentials(dataDir))?.mqtt.urls).toEqual(urls);
  });

  it('takes an answer without a list (a cloud from before clusters) as its one address', async () => {
    const dataDir = await makeTempDir();
    const base = answer(fakeRobotId());
    expect(base.mqtt).not.toHaveProperty('urls');
    const creds = await enroll({ api: 'http://c', token: 't', dataDir, fetch: fakeApi(200, base).fetch });
    expect(creds.mqtt).toMatchObject({ url: base.mqtt.url, urls: [base.mqtt.url] });
  });

  it("turns the API's error body into a clear error and stores nothing", async () => {
    const dataDir = await makeTempDir();
    const api = fakeApi(401, { error: { code: 'unauthenticated', message: 'enrollment token is used up' } });
    const err = (await enroll({ api: 'http://c', token: 'ret_x', dataDir, fetch: api.fetch }).catch((e: unknown) => e)) as EnrollError;
    expect(err).toBeInstanceOf(EnrollError);
    expect(err.code).toBe('unauthenticated');
    expect(err.status).toBe(401);
    expect(err.message).toContain('enrollment token is used up');
    expect(await readCredentials(dataDir)).toBeUndefined();
  });

  it('rejects an answer of the wrong shape', async () => {
    const dataDir = await makeTempDir();
    await expect(enroll({ api: 'http://c', token: 't', dataDir, fetch: fakeApi(200, { robot_id: 'x' }).fetch })).rejects.toMatchObject({ code: 'invalid_response' });
    await expect(enroll({ api: 'http://c', token: 't', dataDir, fetch: fakeApi(200, 'not json').fetch })).rejects.toMatchObject({ code: 'invalid_response' });
    await expect(enroll({ api: 'http://c', token: 't', dataDir, fetch: fakeApi(500, 'oops').fetch })).rejects.toMatchObject({ code: 'invalid_response' });
  });

  it('refuses to replace credentials unless forced', async () => {
    const dataDir = await makeTempDir();
    const first = await enroll({ api: 'http://c', token: 't', dataDir, fetch: fakeApi(200, answer(fakeRobotId())).fetch });
    const api = fakeApi(200, answer(fakeRobotId()));
    await expect(enroll({ api: 'http://c', token: 't', dataDir, fetch: api.fetch })).rejects.toMatchObject({ code: 'already_enrolled' });
    expect(api.calls).toHaveLength(0);
    expect((await readCredentials(dataDir))?.robot_id).toBe(first.robot_id);
    const second = await enroll({ api: 'http://c', token: 't', dataDir, force: true, fetch: api.fetch });
    expect((await readCredentials(dataDir))?.robot_id).toBe(second.robot_id);
    expect(second.robot_id).not.toBe(first.robot_id);
  });
});
