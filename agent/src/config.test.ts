import { describe, expect, it } from 'vitest';
import { AGENT_RUNTIME_VERSION, LEGACY_RUNTIME_VERSION, parseAgentConfig, runtimeVersionOf } from './config.js';

describe('agent config', () => {
  it('has documented defaults and is frozen', () => {
    const c = parseAgentConfig({ dataDir: '/tmp/x' });
    expect(c).toMatchObject({
      legacyRuntime: false,
      bytesPerSecond: 65536,
      chunkIntervalMs: 100,
      finalizingDelayMs: 0,
      reconnectMinMs: 500,
      reconnectMaxMs: 30_000,
      commandResultWindowMs: 24 * 60 * 60 * 1000,
      logLevel: 'info',
      sync: true,
      syncConcurrency: 2,
      syncPartParallel: 3,
      syncGrantTimeoutMs: 30_000,
      syncRetryScheduleMs: [10_000, 60_000, 300_000, 900_000, 3_600_000],
      syncJitter: 0.2,
      uploadTimeoutMs: 120_000,
      allowHttpUploads: false,
    });
    expect(c.uploadCaFile).toBeUndefined();
    expect(c.uploadLimit).toBeUndefined();
    expect(Object.isFrozen(c)).toBe(true);
    expect(runtimeVersionOf(c)).toBe(AGENT_RUNTIME_VERSION);
    expect(runtimeVersionOf(parseAgentConfig({ dataDir: '/tmp/x', legacyRuntime: true }))).toBe(LEGACY_RUNTIME_VERSION);
  });

  it('coerces flag strings and rejects bad values', () => {
    expect(parseAgentConfig({ dataDir: 'd', bytesPerSecond: '1024' }).bytesPerSecond).toBe(1024);
    expect(() => parseAgentConfig({ dataDir: 'd', bytesPerSecond: 0 })).toThrow();
    expect(parseAgentConfig({ dataDir: 'd', uploadLimit: '10485760' }).uploadLimit).toBe(10_485_760);
    expect(() => parseAgentConfig({ dataDir: 'd', uploadLimit: '100' })).toThrow();
    expect(() => parseAgentConfig({ dataDir: 'd', mqttUrl: 'http://x' })).toThrow();
    expect(() => parseAgentConfig({ dataDir: 'd', reconnectMinMs: 5000, reconnectMaxMs: 1000 })).toThrow(/reconnectMinMs/);
    expect(() => parseAgentConfig({ dataDir: 'd', licenseKey: 'x' } as never)).toThrow();
  });
});
