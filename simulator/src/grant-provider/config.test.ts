import { describe, expect, test } from 'vitest';
import { parseGrantProviderConfig } from './config.js';

const base = { secrets: ['dsec_0123456789abcdef'], s3Bucket: 'bucket' };

describe('parseGrantProviderConfig', () => {
  test('defaults: loopback, one-hour URLs, 64 MiB threshold, 16 MiB parts, 30 s deferrals', () => {
    expect(parseGrantProviderConfig({ ...base, insecureHttp: true })).toMatchObject({
      host: '127.0.0.1',
      port: 8443,
      urlLifetimeS: 3600,
      multipartThresholdBytes: 64 * 1024 * 1024,
      partSizeBytes: 16 * 1024 * 1024,
      retryAfterS: 30,
      keyPrefix: '',
      reads: true,
    });
  });

  test.each([
    ['HTTPS without a certificate', {}],
    ['a certificate without its key', { tlsCertFile: 'c.pem' }],
    ['both HTTPS and plain HTTP', { tlsCertFile: 'c.pem', tlsKeyFile: 'k.pem', insecureHttp: true }],
    ['an access key id without its secret', { insecureHttp: true, s3AccessKeyId: 'AKIA' }],
    ['parts under S3’s 5 MiB', { insecureHttp: true, partSizeBytes: 1024 }],
    ['three secrets', { insecureHttp: true, secrets: ['dsec_0123456789abcdef', 'dsec_0123456789abcdeg', 'dsec_0123456789abcdeh'] }],
    ['a key prefix that climbs', { insecureHttp: true, keyPrefix: '../x/' }],
  ])('refuses %s', (_name, extra) => {
    expect(() => parseGrantProviderConfig({ ...base, ...extra })).toThrow();
  });
});
