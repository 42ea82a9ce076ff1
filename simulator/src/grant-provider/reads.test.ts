import { Writable } from 'node:stream';
import { ManualClock, ReadAnswerSchema, type ReadRequestEnvelope } from '@fleet/protocol';
import { pino } from 'pino';
import { describe, expect, test } from 'vitest';
import { parseGrantProviderConfig, type GrantProviderConfigInput } from './config.js';
import { ProviderError } from './errors.js';
import { answerReadRequest, readKeyPrefix } from './reads.js';
import { createS3UploadStore, type UploadStore } from './s3-store.js';

const base = { secrets: ['dsec_0123456789abcdef'], insecureHttp: true, s3Bucket: 'bucket', keyPrefix: 'fleet/' } satisfies GrantProviderConfigInput;
const config = parseGrantProviderConfig(base);

/** Every log line, to show that no URL reaches it. */
function capturingLogger() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString('utf8'));
      done();
    },
  });
  return { lines, logger: pino({ level: 'trace' }, stream) };
}

/** Presigns nothing: each URL says what it was signed for. */
function fakeStore(): UploadStore & { gets: string[] } {
  const gets: string[] = [];
  const never = async (): Promise<never> => {
    throw new Error('a read must not reach this');
  };
  return {
    gets,
    listUploads: never,
    createUpload: never,
    presignPut: never,
    presignPart: never,
    presignComplete: never,
    presignGet: async (key, at, expiresInS) => (gets.push(key), `https://s3/${key}?at=${at.getTime()}&ttl=${expiresInS}&X-Amz-Signature=secret`),
    close: () => undefined,
  };
}

function envelope(paths: string[], extra: Partial<ReadRequestEnvelope['request']> = {}): ReadRequestEnvelope {
  return {
    episode_id: 'ep_1',
    org_id: 'org_1',
    request: {
      destination_id: 'dst_1',
      episode: { robot_id: 'rob_1', recording_session_id: 'rs_1', episode_seq: 1 },
      object_key: null,
      files: paths.map((path) => ({ path, size_bytes: 10, sha256: 'a'.repeat(64) })),
      expires_in_s: 900,
      ...extra,
    },
  };
}

function setup() {
  const store = fakeStore();
  const clock = new ManualClock(Date.parse('2026-06-01T00:00:00Z'));
  const { lines, logger } = capturingLogger();
  return { store, clock, lines, deps: { store, clock, logger } };
}

describe('answerReadRequest', () => {
  test('one GET per file in the order asked, under the layout prefix, all expiring after the asked lifetime', async () => {
    const { store, clock, lines, deps } = setup();
    const answer = await answerReadRequest(envelope(['b.mcap', 'a/meta.json']), config, deps);
    expect(ReadAnswerSchema.safeParse(answer).success).toBe(true);
    const expiresAt = new Date(clock.now() + 900_000).toISOString();
    expect(answer).toEqual({
      files: [
        { path: 'b.mcap', url: `https://s3/fleet/org_1/rob_1/ep_1/b.mcap?at=${clock.now()}&ttl=900&X-Amz-Signature=secret`, expires_at: expiresAt },
        { path: 'a/meta.json', url: `https://s3/fleet/org_1/rob_1/ep_1/a/meta.json?at=${clock.now()}&ttl=900&X-Amz-Signature=secret`, expires_at: expiresAt },
      ],
    });
    expect(store.gets).toEqual(['fleet/org_1/rob_1/ep_1/b.mcap', 'fleet/org_1/rob_1/ep_1/a/meta.json']);
    // Issued and logged, but the log holds no URL.
    expect(lines.join('')).toContain('read links issued');
    expect(lines.join('')).not.toMatch(/https:|X-Amz-Signature/);
  });

  test("the replica's object_key, when the cloud has one, is where the files are read", async () => {
    const { store, deps } = setup();
    await answerReadRequest(envelope(['x.bin'], { object_key: 'fleet/elsewhere/ep_1/' }), config, deps);
    expect(store.gets).toEqual(['fleet/elsewhere/ep_1/x.bin']);
  });

  test('the lifetime is the shortest of the request, the configured URL lifetime and one hour', async () => {
    const { clock, deps } = setup();
    const short = parseGrantProviderConfig({ ...base, urlLifetimeS: 60 });
    const long = parseGrantProviderConfig({ ...base, urlLifetimeS: 7 * 24 * 3600 });
    const expiry = async (c: typeof config, expires_in_s: number) => {
      const answer = await answerReadRequest(envelope(['a'], { expires_in_s }), c, deps);
      if (!('files' in answer)) throw new Error('expected links');
      return Date.parse(answer.files[0]!.expires_at) - clock.now();
    };
    expect(await expiry(short, 900)).toBe(60_000);
    expect(await expiry(long, 900)).toBe(900_000);
    // Past the schema's bound (a caller of the function, not the server): still one hour at most.
    expect(await expiry(long, 5000)).toBe(3600_000);
  });

  test.each([
    ['outside the key prefix', 'other/org_1/rob_1/ep_1/'],
    ['climbing out of it', 'fleet/../secrets/'],
    ['with a dot segment', 'fleet/./org_1/'],
    ['absolute', '/fleet/org_1/'],
    ['with a backslash', 'fleet\\..\\x/'],
  ])('an object_key %s is refused in words, and nothing is presigned', async (_name, objectKey) => {
    const { store, deps } = setup();
    const answer = await answerReadRequest(envelope(['a'], { object_key: objectKey }), config, deps);
    expect(answer).toEqual({ refused: { message: "the replica's object key is outside this provider's key prefix" } });
    expect(ReadAnswerSchema.safeParse(answer).success).toBe(true);
    expect(store.gets).toEqual([]);
  });

  test('with no key prefix any relative object_key is read; without one the layout prefix escapes the ids', () => {
    expect(readKeyPrefix('', envelope(['a'], { object_key: 'org_1/rob_1/ep_1/' }))).toBe('org_1/rob_1/ep_1/');
    expect(readKeyPrefix('', { ...envelope(['a']), episode_id: '..', org_id: 'a/b' })).toBe('a%2Fb/rob_1/_../');
  });

  test('a presigner failure is a 500 without details, logged by name only', async () => {
    const { store, lines, deps } = setup();
    store.presignGet = async () => {
      throw Object.assign(new Error('Could not load credentials from any providers'), { name: 'CredentialsProviderError' });
    };
    const err = await answerReadRequest(envelope(['a']), config, deps).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProviderError);
    expect(err).toMatchObject({ code: 'internal', message: 'the read links could not be presigned' });
    expect(lines.join('')).toContain('CredentialsProviderError');
  });
});

describe('createS3UploadStore presignGet (the AWS SDK, nothing sent)', () => {
  test('a GET URL of the key with the lifetime asked, signing only host, no checksum mode', async () => {
    const store = createS3UploadStore(
      parseGrantProviderConfig({ ...base, s3Endpoint: 'http://127.0.0.1:9', s3ForcePathStyle: true, s3AccessKeyId: 'AKIDEXAMPLE', s3SecretAccessKey: 'secret-key-example' }),
    );
    try {
      const at = new Date('2026-06-01T00:00:00Z');
      const url = new URL(await store.presignGet('fleet/org_1/rob_1/ep_1/recording.mcap', at, 900));
      expect(`${url.origin}${url.pathname}`).toBe('http://127.0.0.1:9/bucket/fleet/org_1/rob_1/ep_1/recording.mcap');
      expect(url.searchParams.get('X-Amz-Expires')).toBe('900');
      expect(url.searchParams.get('X-Amz-Date')).toBe('20260601T000000Z');
      expect(url.searchParams.get('X-Amz-SignedHeaders')).toBe('host');
      expect(url.searchParams.get('X-Amz-Signature')).toMatch(/^[0-9a-f]{64}$/);
      expect(url.searchParams.has('x-amz-checksum-mode')).toBe(false);
    } finally {
      store.close();
    }
  });
});
