import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { checkA11y } from '../../test/support/browser.js';
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
});
