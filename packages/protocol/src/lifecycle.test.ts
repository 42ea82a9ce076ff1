import { describe, expect, it } from 'vitest';
import { Lifecycle } from './lifecycle.js';

describe('Lifecycle', () => {
  it('starts in order and closes in reverse', async () => {
    const log: string[] = [];
    const life = new Lifecycle();
    for (const name of ['store', 'broker', 'link', 'http']) {
      await life.add(name, async () => {
        log.push(`start ${name}`);
        return { value: name, close: async () => void log.push(`close ${name}`) };
      });
    }
    expect(life.started).toEqual(['store', 'broker', 'link', 'http']);
    await life.close();
    expect(log).toEqual(['start store', 'start broker', 'start link', 'start http', 'close http', 'close link', 'close broker', 'close store']);
  });

  it('undoes what started when a later start fails, and a failing close does not stop the rest', async () => {
    const log: string[] = [];
    const errors: string[] = [];
    const life = new Lifecycle((name) => errors.push(name));
    await life.add('store', async () => ({ value: 1, close: async () => void log.push('close store') }));
    await life.add('broker', async () => ({
      value: 2,
      close: async () => {
        throw new Error('boom');
      },
    }));
    await expect(life.add('http', async () => Promise.reject(new Error('EADDRINUSE')))).rejects.toThrow('EADDRINUSE');
    await life.close();
    expect(log).toEqual(['close store']);
    expect(errors).toEqual(['broker']);
    // Closing twice closes once; nothing starts after close.
    await life.close();
    expect(log).toEqual(['close store']);
    await expect(life.add('late', async () => ({ value: 0, close: async () => undefined }))).rejects.toThrow(/shutting down/);
  });
});
