import { chmod, mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { MAX_BROKER_URLS } from '@fleet/protocol';
import { CredentialsError } from './errors.js';

export const CREDENTIALS_FILE = 'credentials.json';

/** What enrollment leaves on the robot: its identity and its broker login. */
export const CredentialsSchema = z.object({
  robot_id: z.string().min(1),
  name: z.string(),
  mqtt: z.object({
    /** The broker address to use first (the first of `urls`). */
    url: z.string().min(1),
    /**
     * Every broker address the robot may use, in the order it tries them (a cluster's nodes, as the
     * cloud handed them out). Absent in files written before it existed: then `url` alone.
     */
    urls: z.array(z.string().min(1)).min(1).max(MAX_BROKER_URLS).optional(),
    client_id: z.string().min(1),
    username: z.string().min(1),
    password: z.string().min(1),
    /**
     * The password before the last rotation, kept until the robot has once connected with the new
     * one: if the cloud never read the robot's answer, an external broker still has only this one.
     * Absent in files written before it existed and once the new password has worked.
     */
    previous_password: z.string().min(1).optional(),
    topic_prefix: z.string().min(1),
  }),
  /** The API the robot enrolled with. */
  api_url: z.string().min(1),
  /** The platform given at enrollment; announced unless the agent is started with another. */
  platform: z.string().min(1).optional(),
});
export type Credentials = z.infer<typeof CredentialsSchema>;

export function credentialsPath(dataDir: string): string {
  return join(dataDir, CREDENTIALS_FILE);
}

/** The stored credentials, or undefined when the robot has not enrolled. */
export async function readCredentials(dataDir: string): Promise<Credentials | undefined> {
  const path = credentialsPath(dataDir);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new CredentialsError(`${path} is not valid JSON; enroll again with --force`);
  }
  const parsed = CredentialsSchema.safeParse(json);
  if (!parsed.success) throw new CredentialsError(`${path} is incomplete (${parsed.error.issues.map((i) => i.path.join('.')).join(', ')}); enroll again with --force`);
  return parsed.data;
}

/**
 * Writes the credentials with mode 0600 (the password is in there) by way of a temporary file
 * and a rename, so a crash never leaves half a file behind.
 */
export async function writeCredentials(dataDir: string, credentials: Credentials): Promise<void> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const path = credentialsPath(dataDir);
  const tmp = `${path}.tmp-${process.pid}`;
  const fh = await open(tmp, 'w', 0o600);
  try {
    await fh.writeFile(`${JSON.stringify(CredentialsSchema.parse(credentials), null, 2)}\n`);
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    // The mode given to open() is filtered by the umask; make it exact.
    await chmod(tmp, 0o600);
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  // The rename is durable once the directory is: a rotated password must survive a power cut
  // right after the robot told the cloud it has it.
  const dir = await open(dataDir, 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}

/**
 * A credential rotation (`credentials.rotate`): the same identity with the new broker password,
 * written durably before the robot acknowledges it. Returns what is stored now.
 *
 * The password the broker accepts now is kept as the previous one: `inUse`, the password of the
 * live connection the rotation arrived on, or else the stored previous password if there is one
 * (the current one has not worked yet), or else the current one. The cloud sends the same secret
 * again until it reads an answer, so storing it again keeps the previous password as it was.
 */
export async function storeRotatedPassword(dataDir: string, current: Credentials, password: string, inUse?: string): Promise<Credentials> {
  const previous = inUse ?? current.mqtt.previous_password ?? current.mqtt.password;
  const { previous_password: _dropped, ...mqtt } = current.mqtt;
  const next: Credentials = { ...current, mqtt: { ...mqtt, password, ...(previous !== password ? { previous_password: previous } : {}) } };
  await writeCredentials(dataDir, next);
  return next;
}

/**
 * The broker accepted `password`: if it is still the stored one, the previous password is no
 * longer needed and is dropped (durably). Returns what is stored now.
 */
export async function dropPreviousPassword(dataDir: string, current: Credentials, password: string): Promise<Credentials> {
  if (current.mqtt.previous_password === undefined || current.mqtt.password !== password) return current;
  const { previous_password: _dropped, ...mqtt } = current.mqtt;
  const next: Credentials = { ...current, mqtt };
  await writeCredentials(dataDir, next);
  return next;
}
