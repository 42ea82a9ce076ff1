import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { OpaqueIds } from './opaque-ids.js';

export const SECRET_KEY_FILE = 'secret.key';

/**
 * Authenticated encryption (AES-256-GCM) for what the cloud must keep but may not store in the
 * clear: stored idempotent responses (they can hold a freshly created key), and later the
 * signing secrets of webhooks and destinations, which must be usable, so cannot be hashed.
 */
export class SecretBox {
  private ids: OpaqueIds | undefined;

  constructor(private readonly key: Buffer) {
    if (key.length !== 32) throw new Error('secret key must be 32 bytes');
  }

  static random(): SecretBox {
    return new SecretBox(randomBytes(32));
  }

  /** Names the key without revealing it: an HMAC of a fixed label (hex, 32 characters). */
  fingerprint(): string {
    return createHmac('sha256', this.key).update('fleet secret key fingerprint v1').digest('hex').slice(0, 32);
  }

  /** Handles for globally numbered rows (opaque-ids.ts), under a key derived from this one. */
  opaqueIds(): OpaqueIds {
    return (this.ids ??= new OpaqueIds(createHmac('sha256', this.key).update('fleet opaque ids v1').digest()));
  }

  seal(plain: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    const ct = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
    return `v1.${Buffer.concat([iv, cipher.getAuthTag(), ct]).toString('base64url')}`;
  }

  open(sealed: string): string {
    if (!sealed.startsWith('v1.')) throw new Error('unknown sealed format');
    const raw = Buffer.from(sealed.slice(3), 'base64url');
    const decipher = createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
  }
}

/**
 * The installation's key: given (base64, 32 bytes, e.g. shared by several replicas), or read
 * from `<dataDir>/secret.key`, created with mode 0600 on first start.
 */
export function loadSecretBox(dataDir: string, givenBase64?: string): SecretBox {
  if (givenBase64) return new SecretBox(Buffer.from(givenBase64, 'base64'));
  if (dataDir === ':memory:') return SecretBox.random();
  const file = join(dataDir, SECRET_KEY_FILE);
  if (!existsSync(file)) {
    // With PostgreSQL nothing else creates the data directory (it keeps this key and admin-key).
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    try {
      writeFileSync(file, randomBytes(32).toString('base64'), { mode: 0o600, flag: 'wx' });
    } catch (err) {
      // Another process created it first: use theirs.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
  return new SecretBox(Buffer.from(readFileSync(file, 'utf8').trim(), 'base64'));
}
