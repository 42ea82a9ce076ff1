import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { credentialsPath, dropPreviousPassword, readCredentials, storeRotatedPassword, writeCredentials } from './credentials.js';
import { makeTempDir, removeTempDirs, testCredentials } from './test-support.js';

const OLD = 'rsec_old_secret_0123456789abcdefghijklmnopq';
const NEW = 'rsec_new_secret_0123456789abcdefghijklmnopq';

afterEach(async () => {
  await removeTempDirs();
});

describe('credentials.json', () => {
  it('a file written before the previous password existed still parses, without one', async () => {
    const dir = await makeTempDir();
    const creds = testCredentials(undefined, 'mqtt://127.0.0.1:1883', OLD);
    await mkdir(dir, { recursive: true });
    await writeFile(credentialsPath(dir), JSON.stringify(creds));
    const read = await readCredentials(dir);
    expect(read).toEqual(creds);
    expect(read?.mqtt.previous_password).toBeUndefined();
  });

  it('a rotation keeps the old password as the previous one, in a file of mode 0600', async () => {
    const dir = await makeTempDir();
    const creds = testCredentials(undefined, 'mqtt://127.0.0.1:1883', OLD);
    await writeCredentials(dir, creds);
    const stored = await storeRotatedPassword(dir, creds, NEW);
    expect(stored.mqtt).toMatchObject({ password: NEW, previous_password: OLD });
    expect(await readCredentials(dir)).toEqual(stored);
    expect((await stat(credentialsPath(dir))).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await readFile(credentialsPath(dir), 'utf8'))).toMatchObject({ mqtt: { password: NEW, previous_password: OLD } });
  });

  it('the same secret stored again keeps the previous password instead of replacing it with the current one', async () => {
    const dir = await makeTempDir();
    const once = await storeRotatedPassword(dir, testCredentials(undefined, undefined, OLD), NEW);
    const twice = await storeRotatedPassword(dir, once, NEW);
    expect(twice.mqtt).toMatchObject({ password: NEW, previous_password: OLD });
    expect((await readCredentials(dir))?.mqtt).toMatchObject({ password: NEW, previous_password: OLD });
  });

  it('the password of the live connection is the one kept; none is kept when it is the new one', async () => {
    const dir = await makeTempDir();
    const base = testCredentials(undefined, undefined, NEW);
    const creds = { ...base, mqtt: { ...base.mqtt, previous_password: OLD } };
    const third = 'rsec_third_secret_0123456789abcdefghijklmno';
    expect((await storeRotatedPassword(dir, creds, third, NEW)).mqtt).toMatchObject({ password: third, previous_password: NEW });
    const same = await storeRotatedPassword(dir, creds, NEW, NEW);
    expect(same.mqtt.password).toBe(NEW);
    expect(same.mqtt.previous_password).toBeUndefined();
  });

  it('the previous password is dropped durably once the stored current one worked, and only then', async () => {
    const dir = await makeTempDir();
    const stored = await storeRotatedPassword(dir, testCredentials(undefined, undefined, OLD), NEW);
    // A password that is no longer the stored one (a later rotation replaced it) changes nothing.
    expect(await dropPreviousPassword(dir, stored, OLD)).toBe(stored);
    expect((await readCredentials(dir))?.mqtt.previous_password).toBe(OLD);
    const dropped = await dropPreviousPassword(dir, stored, NEW);
    expect(dropped.mqtt.previous_password).toBeUndefined();
    expect(await readCredentials(dir)).toEqual(dropped);
    expect((await stat(credentialsPath(dir))).mode & 0o777).toBe(0o600);
  });
});
