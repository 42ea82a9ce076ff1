import { z } from 'zod';

const MiB = 1024 * 1024;
/** S3's rules: every part but the last at least 5 MiB, at most 5 GiB, at most 10,000 parts. */
export const S3_MIN_PART_BYTES = 5 * MiB;
export const S3_MAX_PART_BYTES = 5 * 1024 * MiB;
export const S3_MAX_PARTS = 10_000;

const secret = z
  .string()
  .min(16)
  .max(512)
  .refine((s) => !/[\s,]/.test(s), 'must not contain white space or commas');

/**
 * Everything the reference grant provider can be told, with its default. The CLI merges flags
 * and FLEET_PROVIDER_* variables and parses them here once; nothing below reads process.env.
 */
export const GrantProviderConfigSchema = z
  .strictObject({
    host: z.string().min(1).default('127.0.0.1'),
    port: z.coerce.number().int().min(0).max(65535).default(8443),
    /** PEM files; both or neither. Without them `insecureHttp` must be set. */
    tlsCertFile: z.string().min(1).optional(),
    tlsKeyFile: z.string().min(1).optional(),
    /** Plain HTTP, for a provider behind a TLS-terminating proxy or on a developer's machine. */
    insecureHttp: z.boolean().default(false),
    /** The destination's `dsec_` secret, and during a rotation the one it replaces. */
    secrets: z.array(secret).min(1).max(2),
    /** How far a signature's timestamp may be from our clock. */
    signatureToleranceS: z.coerce.number().int().min(1).max(3600).default(300),
    /** Empty: the AWS endpoint of `region`. Otherwise any S3-compatible endpoint (MinIO, R2, …). */
    s3Endpoint: z.url({ protocol: /^https?$/ }).optional(),
    s3Region: z.string().min(1).default('us-east-1'),
    s3Bucket: z.string().min(3).max(63),
    /** Both or neither; neither uses the AWS SDK's default credential chain (instance roles, …). */
    s3AccessKeyId: z.string().min(1).optional(),
    s3SecretAccessKey: z.string().min(1).optional(),
    /** `https://endpoint/bucket/key` instead of `https://bucket.endpoint/key` (MinIO, most local stores). */
    s3ForcePathStyle: z.boolean().default(false),
    /** Prepended to every object key, e.g. `fleet/`. */
    keyPrefix: z
      .string()
      .max(512)
      .default('')
      .refine((p) => !p.startsWith('/') && !p.split('/').includes('..'), 'must be relative, without ..'),
    /** Files of at least this many bytes are uploaded in parts. */
    multipartThresholdBytes: z.coerce.number().int().min(1).default(64 * MiB),
    /** Bytes per part (raised for a file that would need more than 10,000 parts). */
    partSizeBytes: z.coerce.number().int().min(S3_MIN_PART_BYTES).max(S3_MAX_PART_BYTES).default(16 * MiB),
    /** Lifetime of the presigned URLs and the grant's `expires_at` (spec: about an hour; seconds are for tests of expiry). */
    urlLifetimeS: z.coerce.number().int().min(1).max(7 * 24 * 3600).default(3600),
    /**
     * Answer read requests (`read.request`: presigned GET URLs for a replica's files). Off, a read
     * request is 501 `not_implemented`, as a provider without read support answers.
     */
    reads: z.boolean().default(true),
    /** What a deferral asks the robot to wait before asking again. */
    retryAfterS: z.coerce.number().int().min(1).max(24 * 3600).default(30),
    /** Time budget for the store calls of one grant; past it the answer is a deferral. */
    storeTimeoutMs: z.coerce.number().int().min(100).max(9000).default(5000),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  })
  .refine((c) => (c.tlsCertFile === undefined) === (c.tlsKeyFile === undefined), { message: 'give both the certificate and the key', path: ['tlsCertFile'] })
  .refine((c) => c.insecureHttp || c.tlsCertFile !== undefined, { message: 'HTTPS needs a certificate and key (or --insecure-http)', path: ['tlsCertFile'] })
  .refine((c) => !(c.insecureHttp && c.tlsCertFile !== undefined), { message: 'choose HTTPS or --insecure-http, not both', path: ['insecureHttp'] })
  .refine((c) => (c.s3AccessKeyId === undefined) === (c.s3SecretAccessKey === undefined), {
    message: 'give both the access key id and the secret access key',
    path: ['s3AccessKeyId'],
  });

export type GrantProviderConfig = Readonly<z.output<typeof GrantProviderConfigSchema>>;
export type GrantProviderConfigInput = z.input<typeof GrantProviderConfigSchema>;

export function parseGrantProviderConfig(input: GrantProviderConfigInput): GrantProviderConfig {
  return Object.freeze(GrantProviderConfigSchema.parse(input));
}
