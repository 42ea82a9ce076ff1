/**
 * The fleet page and a robot's page in a real browser against a real cloud with simulated
 * robots: live presence, filters kept in the URL, keyset pages, the episode verbs with their
 * metadata form, command confirmations, a read-only key, and tenant text rendered as text.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { Page, Response } from 'playwright-core';
import { checkA11y, PHONE, screenshot } from '../../test/support/browser.js';
import { makeTempDir } from '../../test/support/cloud.js';
import { startFleet } from '../../test/support/robots.js';
import { COMMAND_ARGS_LIMITS } from '@fleet/protocol';
import { buildStartBody } from '../src/ui/robot-metadata.js';
import { signIn, startConsoleHarness, type ConsoleHarness } from './harness.js';

/** Set FLEET_CONSOLE_SHOTS=<dir> to keep screenshots of the pages as the tests see them. */
const SHOTS = process.env.FLEET_CONSOLE_SHOTS;
const XSS_NAME = '<img src=x onerror=window.__xss=1>';

let h: ConsoleHarness;
let xssRobot: string;

async function api<T>(path: string, init: { method?: string; json?: unknown; key?: string } = {}): Promise<T> {
  const res = await h.cloud.fetch(path, { ...(init.method ? { method: init.method } : {}), ...(init.json !== undefined ? { json: init.json } : {}), ...(init.key ? { key: init.key } : {}) });
  const text = await res.text();
  if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${path} answered ${res.status}: ${text}`);
  return (text ? JSON.parse(text) : {}) as T;
}

/** Enrolls `names` (never connected) with one token through the API. */
async function enroll(names: readonly string[]): Promise<string[]> {
  const token = await api<{ token: string }>('/v1/robots/enrollment-tokens', { method: 'POST', json: { max_uses: names.length } });
  const ids: string[] = [];
  for (const name of names) ids.push((await api<{ robot_id: string }>('/v1/robots/enroll', { method: 'POST', json: { token: token.token, name } })).robot_id);
  return ids;
}

beforeAll(async () => {
  h = await startConsoleHarness({ robots: 3, subtaskMs: 300 });
  [xssRobot] = (await enroll([XSS_NAME])) as [string];
});
afterAll(async () => {
  await h?.[Symbol.asyncDispose]();
});
// Each tab holds an event stream open; the browser allows six connections to one origin.
afterEach(async () => {
  await Promise.all(h.browser.context.pages().map((p) => p.close()));
});

/** A full-page screenshot from the top (a scrolled page draws its sticky bar in the middle). */
async function shot(page: Page, name: string): Promise<void> {
  if (!SHOTS) return;
  await page.evaluate(() => window.scrollTo(0, 0));
  await screenshot(page, SHOTS, name, { fullPage: true });
}

const row = (page: Page, id: string) => page.locator(`tr[data-robot-id="${id}"]`);
const rowNames = (page: Page) => page.locator('table.fleet-table tbody th[scope=row] a').allTextContents();

/** A mark that survives only as long as the document: gone after a reload. */
async function markDocument(page: Page): Promise<void> {
  await page.evaluate(() => ((window as unknown as { __sameDocument: boolean }).__sameDocument = true));
}
async function sameDocument(page: Page): Promise<boolean> {
  return page.evaluate(() => (window as unknown as { __sameDocument?: boolean }).__sameDocument === true);
}

async function openFleet(page: Page, query = ''): Promise<void> {
  await page.goto(`${h.baseUrl}/console/fleet${query}`);
  await page.locator('table.fleet-table, p.empty').first().waitFor();
}

describe('fleet page', () => {
  test('lists the simulated robots; a robot going offline and coming back follows the stream without a reload', async () => {
    await using dir = await makeTempDir('fleet-late-');
    let late = await startFleet(h.cloud, { count: 1, dataDir: dir.path, logLevel: 'warn', args: ['--name-prefix', 'late'] });
    try {
      const lateId = late.robots[0]!;
      const { page, errors } = await h.browser.newPage();
      await signIn(page, h.baseUrl, h.adminKey);
      await openFleet(page);
      for (const id of [...h.robots, lateId]) await expect.poll(() => row(page, id).getByText('online', { exact: true }).count()).toBe(1);
      await expect.poll(() => row(page, xssRobot).getByText('offline', { exact: true }).count()).toBe(1);
      expect(await row(page, xssRobot).textContent()).toContain('never seen');
      expect(await checkA11y(page)).toEqual([]);
      await shot(page, 'fleet');
      await markDocument(page);

      await late.kill('SIGTERM');
      await expect.poll(() => row(page, lateId).getByText('offline', { exact: true }).count(), { timeout: 15_000 }).toBe(1);
      expect(await row(page, lateId).textContent()).toMatch(/last seen (just now|\d+ s ago)/);
      late = await startFleet(h.cloud, { count: 1, dataDir: dir.path, logLevel: 'warn', args: ['--name-prefix', 'late'] });
      expect(late.robots).toEqual([lateId]);
      await expect.poll(() => row(page, lateId).getByText('online', { exact: true }).count(), { timeout: 15_000 }).toBe(1);
      expect(await sameDocument(page)).toBe(true);
      expect(errors).toEqual([]);
    } finally {
      await late[Symbol.asyncDispose]();
    }
  });

  test('search, filters and order narrow the list, are kept in the URL, and survive a reload', async () => {
    const { page, errors } = await h.browser.newPage();
    await signIn(page, h.baseUrl, h.adminKey);
    await openFleet(page);
    await page.getByLabel('Search by name').fill('SIM');
    await expect.poll(() => new URL(page.url()).searchParams.get('q')).toBe('SIM');
    await expect.poll(() => rowNames(page)).toEqual(['sim-0', 'sim-1', 'sim-2']);
    // The Name header sorts the other way round.
    await page.getByRole('button', { name: /^Name/ }).click();
    await expect.poll(() => rowNames(page)).toEqual(['sim-2', 'sim-1', 'sim-0']);
    expect(new URL(page.url()).searchParams.get('order')).toBe('desc');
    await page.getByLabel('Connection').selectOption('false');
    await expect.poll(() => page.getByText('No robot matches these filters').count()).toBe(1);
    await page.getByLabel('Connection').selectOption('true');
    await expect.poll(() => rowNames(page)).toEqual(['sim-2', 'sim-1', 'sim-0']);
    await page.getByLabel('Disk').selectOption('24');
    await expect.poll(() => new URL(page.url()).searchParams.get('hours_to_full_below')).toBe('24');
    await page.getByLabel('Disk').selectOption('');
    await page.getByLabel('Recording state').selectOption('idle');
    await expect.poll(() => rowNames(page)).toEqual(['sim-2', 'sim-1', 'sim-0']);
    const url = new URL(page.url());
    expect(Object.fromEntries(url.searchParams)).toEqual({ q: 'SIM', connected: 'true', recording_state: 'idle', order: 'desc' });
    expect(await checkA11y(page)).toEqual([]);

    await page.reload();
    await page.locator('table.fleet-table').waitFor();
    expect(await page.getByLabel('Search by name').inputValue()).toBe('SIM');
    expect(await page.getByLabel('Connection').inputValue()).toBe('true');
    expect(await page.getByLabel('Recording state').inputValue()).toBe('idle');
    expect(await rowNames(page)).toEqual(['sim-2', 'sim-1', 'sim-0']);
    await page.getByRole('button', { name: 'Clear filters' }).click();
    await expect.poll(() => new URL(page.url()).search).toBe('?order=desc');
    expect(errors).toEqual([]);
  });

  test('pages of 50 with next and previous (keyset), the cursor in the URL', async () => {
    await enroll(Array.from({ length: 53 }, (_, i) => `bulk-${String(i).padStart(2, '0')}`));
    const { page, errors } = await h.browser.newPage();
    await signIn(page, h.baseUrl, h.adminKey);
    await openFleet(page, '?q=bulk');
    await expect.poll(async () => (await rowNames(page)).length).toBe(50);
    expect((await rowNames(page))[0]).toBe('bulk-00');
    expect(await page.getByRole('button', { name: /Previous page/ }).isDisabled()).toBe(true);
    await page.getByRole('button', { name: /Next page/ }).click();
    await expect.poll(() => rowNames(page)).toEqual(['bulk-50', 'bulk-51', 'bulk-52']);
    expect(new URL(page.url()).searchParams.get('cursor')).toBeTruthy();
    expect(await page.getByRole('button', { name: /Next page/ }).isDisabled()).toBe(true);
    await page.reload();
    await expect.poll(() => rowNames(page)).toEqual(['bulk-50', 'bulk-51', 'bulk-52']);
    await page.getByRole('button', { name: /Previous page/ }).click();
    await expect.poll(async () => (await rowNames(page)).at(-1)).toBe('bulk-49');
    expect((await rowNames(page)).length).toBe(50);
    expect(errors).toEqual([]);
  });
});

describe('robot page', () => {
  test('an episode started with metadata (checked at its fields) and finished appears in the recent episodes through the stream', async () => {
    const robot = h.robots[0]!;
    const { page, errors } = await h.browser.newPage();
    await signIn(page, h.baseUrl, h.adminKey);
    await page.goto(`${h.baseUrl}/console/robots/${robot}`);
    await page.getByRole('heading', { level: 1, name: 'sim-0' }).waitFor();
    await page.getByText('No episode reported yet.').waitFor();
    await markDocument(page);
    const sent: string[] = [];
    page.on('request', (r) => {
      if (r.method() === 'POST') sent.push(new URL(r.url()).pathname);
    });

    await page.getByLabel('Task id (optional)', { exact: true }).fill('pick-cube');
    await page.getByLabel('Key 1', { exact: true }).fill('note');
    await page.getByLabel('Value 1', { exact: true }).fill('from the console');
    await page.getByRole('button', { name: 'Add metadata row' }).click();
    await page.getByLabel('Key 2', { exact: true }).fill('attempt');
    await page.getByRole('checkbox', { name: 'JSON value' }).nth(1).check();
    await page.getByLabel('Value 2 (JSON)').fill('{"n": 2');
    await page.getByRole('button', { name: 'Start episode' }).click();
    await expect.poll(() => page.locator('#episode-meta-value-1-error').textContent()).toMatch(/not valid JSON/);
    await page.getByRole('button', { name: 'Add metadata row' }).click();
    await page.getByLabel('Key 3', { exact: true }).fill('note');
    await page.getByRole('button', { name: 'Start episode' }).click();
    await expect.poll(() => page.locator('#episode-meta-key-2-error').textContent()).toMatch(/already used in row 1/);
    expect(await checkA11y(page)).toEqual([]);
    expect(sent).toEqual([]);

    await page.getByRole('button', { name: 'Remove metadata row 3' }).click();
    await page.getByLabel('Value 2 (JSON)').fill('{"n": 2}');
    await page.getByRole('button', { name: 'Start episode' }).click();
    const started = page.locator('.notice', { hasText: 'Start episode: done' });
    await started.waitFor();
    const episodeId = (await started.locator('p code').first().textContent())!;
    expect(episodeId).toMatch(/^ep_/);
    expect(sent).toEqual([`/v1/robots/${robot}/episodes/start`]);
    await expect.poll(() => page.locator('.robot-header-status').textContent()).toContain('recording');
    await shot(page, 'robot');

    await page.getByRole('button', { name: 'Finish', exact: true }).click();
    await page.locator('.notice', { hasText: 'Finish: done' }).waitFor();
    const listed = page.locator(`tr[data-episode-id="${episodeId}"]`);
    await expect.poll(() => listed.count(), { timeout: 20_000 }).toBe(1);
    expect(await listed.getByRole('link').getAttribute('href')).toBe(`/console/episodes/${episodeId}`);
    expect(await listed.textContent()).toContain('success');
    expect(await sameDocument(page)).toBe(true);
    expect(await checkA11y(page)).toEqual([]);
    expect(errors).toEqual([]);
  });

  test('a motion command asks for confirmation; other commands answer at once; results show as the API gives them', async () => {
    const robot = h.robots[1]!;
    const { page, errors } = await h.browser.newPage();
    await signIn(page, h.baseUrl, h.adminKey);
    await page.goto(`${h.baseUrl}/console/robots/${robot}`);
    await page.getByRole('heading', { level: 1, name: 'sim-1' }).waitFor();
    const sent: string[] = [];
    page.on('request', (r) => {
      if (r.method() === 'POST') sent.push(new URL(r.url()).pathname);
    });
    await page.getByRole('button', { name: 'Go home', exact: true }).click();
    const dialog = page.getByRole('dialog', { name: 'Go home?' });
    await dialog.waitFor();
    expect(await checkA11y(page)).toEqual([]);
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden' });
    expect(sent).toEqual([]);
    await page.getByRole('button', { name: 'Go home', exact: true }).click();
    await dialog.getByRole('button', { name: 'Go home' }).click();
    // Done, or declined by the robot (a 200 with ok: false): either is its answer, shown as such.
    await page.locator('.notice', { hasText: /Go home: done|The robot declined Go home/ }).waitFor();
    expect(sent).toEqual([`/v1/robots/${robot}/go-home`]);

    await page.getByRole('button', { name: 'Stack status', exact: true }).click();
    await page.locator('.notice', { hasText: /Stack status: done|The robot declined Stack status/ }).waitFor();
    expect(sent).toEqual([`/v1/robots/${robot}/go-home`, `/v1/robots/${robot}/stack/status`]);

    // A robot that never connected: robot_offline, as the API says it, with its request id.
    await page.goto(`${h.baseUrl}/console/robots/${xssRobot}`);
    await page.getByRole('button', { name: 'Stop stack', exact: true }).click();
    const offline = page.locator('.notice.error', { hasText: 'robot_offline' });
    await offline.waitFor();
    expect(await offline.textContent()).toContain('request_id');
    expect(await page.getByRole('button', { name: 'Send Stop stack again (same command id)' }).count()).toBe(1);
    expect(await checkA11y(page)).toEqual([]);
    expect(errors.filter((e) => !e.includes('503'))).toEqual([]);
  });

  test('admin: a rotation for an offline robot is pending; de-enrollment is confirmed by typing the name', async () => {
    const [spare] = (await enroll(['spare-arm'])) as [string];
    const { page, errors } = await h.browser.newPage();
    await signIn(page, h.baseUrl, h.adminKey);
    await page.goto(`${h.baseUrl}/console/robots/${spare}`);
    await page.getByRole('heading', { level: 1, name: 'spare-arm' }).waitFor();
    await page.getByRole('button', { name: 'Rotate credentials' }).click();
    await page.locator('.notice', { hasText: 'Rotation pending' }).waitFor();
    await expect.poll(() => page.getByText('rotation pending', { exact: true }).count()).toBe(1);

    await page.getByRole('button', { name: 'De-enroll' }).click();
    const dialog = page.getByRole('dialog', { name: 'De-enroll this robot?' });
    const confirm = dialog.getByRole('button', { name: 'De-enroll' });
    expect(await confirm.isDisabled()).toBe(true);
    await dialog.getByLabel('Type spare-arm to confirm').fill('spare-ar');
    expect(await confirm.isDisabled()).toBe(true);
    await dialog.getByLabel('Type spare-arm to confirm').fill('spare-arm');
    await confirm.click();
    await page.locator('.notice', { hasText: /^De-enrolled/ }).waitFor();
    expect(await page.getByRole('button', { name: 'Go home' }).isDisabled()).toBe(true);
    expect(await page.getByRole('button', { name: /Rotate credentials/ }).isDisabled()).toBe(true);
    expect((await api<{ deenrolled_at: string | null }>(`/v1/robots/${spare}`)).deenrolled_at).not.toBeNull();
    expect(await checkA11y(page)).toEqual([]);
    expect(errors).toEqual([]);
  });

  test('a data:read key sees no enabled command or admin action and meets no 403', async () => {
    const { key } = await api<{ key: string }>('/v1/api-keys', { method: 'POST', json: { name: 'reader', scopes: ['data:read'] } });
    const { page, errors } = await h.browser.newPage({ viewport: PHONE });
    const forbidden: string[] = [];
    page.on('response', (r: Response) => {
      if (r.status() === 403) forbidden.push(`${r.request().method()} ${r.url()}`);
    });
    await signIn(page, h.baseUrl, key);
    await page.goto(`${h.baseUrl}/console/robots/${h.robots[0]}`);
    await page.getByRole('heading', { name: 'Episodes of this robot' }).waitFor();
    await page.locator('table.robot-episodes, p.empty').first().waitFor();
    await page.getByRole('heading', { name: 'Sync health' }).waitFor();
    const actions = ['Go home', 'Go to start', 'Start autonomous', 'Stop autonomous', 'Start stack', 'Stop stack', 'Stack status', 'Start episode', 'Finish', 'Fail', 'Discard', 'Rotate credentials', 'De-enroll'];
    for (const name of actions) {
      const b = page.getByRole('button', { name: new RegExp(`^${name}\\b`) });
      expect(await b.count(), name).toBe(1);
      expect(await b.isDisabled(), name).toBe(true);
    }
    expect(await page.getByText('needs the scope robots:command').count()).toBeGreaterThan(0);
    expect(await page.getByText('needs the scope admin').count()).toBeGreaterThan(0);
    expect(await checkA11y(page)).toEqual([]);
    await shot(page, 'robot-data-read-phone');
    // The fleet list needs robots:read or fleet:read: not offered, not requested.
    await page.goto(`${h.baseUrl}/console/fleet`);
    await page.getByRole('heading', { name: 'Not available with this key' }).waitFor();
    expect(forbidden).toEqual([]);
    expect(errors).toEqual([]);
  });

  test('a robot name that looks like markup is shown as text on the list and on its page', async () => {
    const { page, errors } = await h.browser.newPage({ viewport: PHONE });
    await signIn(page, h.baseUrl, h.adminKey);
    if (SHOTS) {
      await openFleet(page, '?q=i');
      await shot(page, 'fleet-phone-all');
    }
    await openFleet(page, `?q=${encodeURIComponent('<img')}`);
    await expect.poll(() => rowNames(page)).toEqual([XSS_NAME]);
    await shot(page, 'fleet-phone');
    await page.getByRole('link', { name: XSS_NAME }).click();
    await page.getByRole('heading', { level: 1, name: XSS_NAME }).waitFor();
    await shot(page, 'robot-phone');
    expect(await page.locator('img').count()).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { __xss?: unknown }).__xss)).toBeUndefined();
    expect(await checkA11y(page)).toEqual([]);
    expect(errors).toEqual([]);
  });
});

describe('page logic (no browser)', () => {
  test('the start form refuses metadata beyond the bound the robot takes, as the API would, and lets the bound itself through', () => {
    /** A JSON array value nested `levels` deep. */
    const nested = (levels: number) => '['.repeat(levels) + ']'.repeat(levels);
    const form = (value: string) => ({ taskId: '', subtaskId: '', rows: [{ key: 'deep', value, json: true }] });
    // The body is depth 1 and `metadata` depth 2: a value may nest maxDepth - 2 levels.
    expect(buildStartBody(form(nested(COMMAND_ARGS_LIMITS.maxDepth - 2))).errors).toEqual({});
    expect(buildStartBody(form(nested(COMMAND_ARGS_LIMITS.maxDepth - 1))).errors['episode-meta-value-0']).toMatch(/nests deeper/);
    const big = { taskId: '', subtaskId: '', rows: [{ key: 'pad', value: 'x'.repeat(COMMAND_ARGS_LIMITS.maxBytes), json: false }] };
    expect(buildStartBody(big).errors['episode-meta-value-0']).toMatch(/larger than 60 KiB/);
  });
});
