import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { checkA11y, type WatchedPage } from '../../test/support/browser.js';
import { signIn, startConsoleHarness, type ConsoleHarness } from './harness.js';

let h: ConsoleHarness;
beforeAll(async () => {
  h = await startConsoleHarness();
});
afterAll(async () => {
  await h?.[Symbol.asyncDispose]();
});

describe('console smoke', () => {
  test('/ lands on the sign-in form of /console/, served with the CSP, without errors or serious accessibility violations', async () => {
    const { page, errors } = await h.browser.newPage();
    const res = await page.goto(`${h.baseUrl}/`);
    expect(res?.status()).toBe(200);
    expect(page.url()).toBe(`${h.baseUrl}/console/`);
    expect(res?.request().redirectedFrom()?.url()).toBe(`${h.baseUrl}/`);
    const headers = res!.headers();
    expect(headers['content-security-policy']).toContain("default-src 'self'");
    expect(headers['content-security-policy']).toContain("script-src 'self'");
    expect(headers['x-frame-options']).toBe('DENY');
    expect(headers['cache-control']).toBe('no-cache');

    await expect.poll(() => page.getByLabel('API key', { exact: true }).isVisible()).toBe(true);
    expect(await page.getByRole('button', { name: 'Sign in', exact: true }).isVisible()).toBe(true);
    expect(await checkA11y(page)).toEqual([]);
    expect(errors).toEqual([]);
  });

  test('signing in with the admin key shows the navigation', async () => {
    const { page, errors } = await h.browser.newPage();
    await signIn(page, h.baseUrl, h.adminKey);
    expect(await page.getByRole('navigation').first().isVisible()).toBe(true);
    // The key is not in the URL.
    expect(page.url()).not.toContain(h.adminKey);
    expect(errors).toEqual([]);
  });

  test('eight tabs of one key share one event stream: every tab is live and the last still loads (a browser allows six connections per origin)', async () => {
    const tabs: WatchedPage[] = [];
    try {
      for (let i = 0; i < 8; i++) {
        const tab = await h.browser.newPage();
        tabs.push(tab);
        await signIn(tab.page, h.baseUrl, h.adminKey);
      }
      for (const { page } of tabs) await expect.poll(() => page.getByRole('status', { name: 'Live updates: live' }).count()).toBe(1);
      // With a stream per tab the eighth would wait for a free connection and never load its list.
      const last = tabs.at(-1)!.page;
      await last.goto(`${h.baseUrl}/console/fleet`);
      await expect.poll(() => last.getByRole('link', { name: /^sim-/ }).count()).toBeGreaterThan(0);
      // Closing the tab that streams hands the stream to another, which stays live.
      await tabs[0]!.page.close();
      await expect.poll(() => tabs[1]!.page.getByRole('status', { name: 'Live updates: live' }).count()).toBe(1);
      for (const { errors } of tabs) expect(errors).toEqual([]);
    } finally {
      for (const { page } of tabs) if (!page.isClosed()) await page.close();
    }
  });
});
