import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Page } from 'playwright-core';
import { createTestPki, startHttpsReceiver, type TestPki, type TestReceiver } from '../../cloud/src/egress/test-https.js';
import { checkA11y, DESKTOP, PHONE, screenshot, type WatchedPage } from '../../test/support/browser.js';
import { makeTempDir, type TempDir } from '../../test/support/cloud.js';
import { startGrantProvider, writeProviderTls, type GrantProviderProcess } from '../../test/support/grant-provider.js';
import { freePort } from '../../test/support/http.js';
import { sendCommand, waitForRobot } from '../../test/support/robots.js';
import { startS3Server, type S3ServerProcess } from '../../test/support/s3-server.js';
import { signIn, startConsoleHarness, type ConsoleHarness } from './harness.js';

/**
 * The administration pages in a real browser against a real cloud: sync (a destination for the
 * reference grant provider in front of an S3-compatible server, routing rules, an episode of a
 * simulated robot verified live on the page), webhooks with their delivery log, API keys (and a
 * key revoked in the middle of a session), enrollment tokens, plan and usage. Text a tenant
 * controls is set to markup on the way and must come out as text.
 *
 * The tests share one cloud and build on each other in order (the destination of the first is
 * the one the rules of the second point at). CONSOLE_SHOTS_DIR=<dir> also writes screenshots.
 */

const XSS = '<img src=x onerror=window.__xss=1>';
/** A URL with markup in its path: the cloud stores it normalized (percent-encoded), and so it shows. */
const XSS_URL = new URL(`https://127.0.0.1:1/${XSS}`).toString();
const SHOTS = process.env.CONSOLE_SHOTS_DIR;

let h: ConsoleHarness;
let pki: TestPki;
let tmp: TempDir;
let tls: { certFile: string; keyFile: string; ca: string };
let s3: S3ServerProcess;
let provider: GrantProviderProcess | undefined;
let providerPort: number;
let receiver: TestReceiver;
const deliveries: { event: string; eventId: string; body: Record<string, unknown> }[] = [];
let robot: string;

beforeAll(async () => {
  pki = createTestPki();
  tmp = await makeTempDir('fleet-console-admin-');
  tls = writeProviderTls(pki, tmp.path);
  [s3, providerPort, receiver] = await Promise.all([
    startS3Server(),
    freePort(),
    startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
      deliveries.push({ event: String(req.headers['x-service-event']), eventId: String(req.headers['x-service-event-id']), body: JSON.parse(req.body) as Record<string, unknown> });
      // /gone answers a status that is not retried: the delivery is dead-lettered at once.
      res.writeHead(req.url.startsWith('/gone') ? 410 : 200);
      res.end();
    }),
  ]);
  // The grant provider and the webhook receiver listen on 127.0.0.1 with certificates of the test CA.
  h = await startConsoleHarness({ robots: 1, cloudArgs: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile], fleetArgs: ['--allow-http-uploads'] });
  robot = h.robots[0]!;
});

afterAll(async () => {
  await provider?.[Symbol.asyncDispose]();
  await h?.[Symbol.asyncDispose]();
  await receiver?.close();
  await s3?.[Symbol.asyncDispose]();
  await tmp?.[Symbol.asyncDispose]();
  pki?.cleanup();
});

async function go(page: Page, path: string): Promise<void> {
  await page.goto(`${h.baseUrl}/console${path}`);
  await page.getByRole('heading', { level: 1 }).first().waitFor();
}

/** A new tab signed in with `key`, on `path`. */
async function open(path: string, key = h.adminKey): Promise<WatchedPage> {
  const w = await h.browser.newPage();
  await signIn(w.page, h.baseUrl, key);
  await go(w.page, path);
  return w;
}

/** No serious accessibility violation on the page as it is, no page error so far, no markup run. */
async function clean(w: WatchedPage): Promise<void> {
  expect(await checkA11y(w.page)).toEqual([]);
  expect(w.errors).toEqual([]);
  expect(await w.page.evaluate(() => (window as unknown as { __xss?: unknown }).__xss)).toBeUndefined();
}

async function shoot(page: Page, name: string): Promise<void> {
  if (!SHOTS) return;
  await screenshot(page, SHOTS, name, { fullPage: true });
  await page.setViewportSize(PHONE);
  await screenshot(page, SHOTS, `${name}-phone`, { fullPage: true });
  await page.setViewportSize(DESKTOP);
}

const secretOnPage = async (page: Page): Promise<string> => {
  const el = page.locator('[data-secret]');
  await el.waitFor();
  return ((await el.textContent()) ?? '').trim();
};

describe('console administration pages', () => {
  test('sync: a destination (its dsec_ shown once), checks in words, a routing rule, and an episode verified live on the page', async () => {
    const w = await open('/sync');
    const { page } = w;
    await page.getByText('No destination yet').waitFor();
    await clean(w);

    // A destination for the reference grant provider; the provider starts with the secret the page showed.
    await page.getByRole('button', { name: 'Add a destination' }).click();
    await page.getByLabel('Grant provider URL').fill(`https://127.0.0.1:${providerPort}/grant`);
    await page.getByRole('button', { name: 'Create destination' }).click();
    const secret = await secretOnPage(page);
    expect(secret).toMatch(/^dsec_/);
    await clean(w);
    provider = await startGrantProvider({ s3, secret, tls, args: ['--port', String(providerPort)] });
    await page.getByRole('button', { name: 'Done, I have stored it' }).click();
    expect(await page.locator('[data-secret]').count()).toBe(0);
    await page.reload();
    await page.locator('table.destinations tbody tr[data-destination-id]').first().waitFor();
    expect(await page.content()).not.toContain(secret);

    await page.getByRole('button', { name: `Check 127.0.0.1:${providerPort}/grant` }).click();
    await page.getByText('Check passed: the provider granted').waitFor();

    // A destination whose URL carries markup: shown as text; its check fails and says what to fix; then revoked.
    await page.getByRole('button', { name: 'Add a destination' }).click();
    await page.getByLabel('Grant provider URL').fill(`https://127.0.0.1:1/${XSS}`);
    await page.getByRole('button', { name: 'Create destination' }).click();
    expect(await secretOnPage(page)).toMatch(/^dsec_/);
    await page.getByRole('button', { name: 'Done, I have stored it' }).click();
    const bad = page.locator('table.destinations tbody tr', { hasText: XSS_URL.replace('https://', '') });
    await bad.getByRole('button', { name: 'Check', exact: false }).click();
    await page.getByText('Check failed: unreachable').waitFor();
    expect(await page.getByText('What to fix:').isVisible()).toBe(true);
    await clean(w);
    await bad.getByRole('button', { name: /^Revoke/ }).click();
    const dialog = page.getByRole('dialog');
    await dialog.getByText(XSS_URL).waitFor();
    await clean(w);
    await dialog.getByRole('button', { name: 'Revoke' }).click();
    await expect.poll(() => bad.count()).toBe(0);
    await page.getByLabel(/Show revoked destinations/).check();
    await bad.getByText('revoked', { exact: true }).waitFor();
    expect(page.url()).toContain('revoked=1');

    // A rule for the robot: its episodes go to the provider's destination.
    await page.getByRole('button', { name: 'Add a rule' }).click();
    await page.getByLabel('Robot id', { exact: true }).fill(robot);
    await page.getByRole('button', { name: 'Add rule at the end' }).click();
    await page.locator('table.rules tbody tr', { hasText: robot }).waitFor();
    await clean(w);

    // An episode recorded now reaches verified; the page follows without a reload, on live events
    // (with the stream up the page does not poll).
    await page.locator('.live-dot.live').waitFor();
    await page.evaluate(() => void ((window as unknown as { __sameDocument: boolean }).__sameDocument = true));
    const start = await sendCommand(h.cloud, robot, 'episodes/start');
    expect(start.status, JSON.stringify(start.body)).toBe(200);
    const episodeId = (start.body as { result: { episode_id: string } }).result.episode_id;
    await waitForRobot(h.cloud, robot, (r) => r.recording_state === 'recording');
    const done = await sendCommand(h.cloud, robot, 'episodes/finish');
    expect(done.status, JSON.stringify(done.body)).toBe(200);

    const good = page.locator(`table.destinations tr[data-destination-id]`, { hasText: `127.0.0.1:${providerPort}/grant` });
    const health = page.locator(`table.health tr[data-robot-id="${robot}"]`);
    await expect
      .poll(
        async () =>
          (await health.count()) === 0
            ? null
            : {
                reported: (await health.locator('[data-col=reported]').textContent())?.trim(),
                unverified: (await health.locator('[data-col=unverified]').textContent())?.trim(),
                forwarded: (await good.locator('[data-col=last-forward]').textContent())?.trim() !== 'never',
              },
        { timeout: 90_000 },
      )
      .toEqual({ reported: '1', unverified: '0', forwarded: true });
    expect(await page.evaluate(() => (window as unknown as { __sameDocument?: boolean }).__sameDocument)).toBe(true);
    const episode = await h.cloud.client().episodes.get(episodeId);
    expect(episode.replicas).toEqual([expect.objectContaining({ state: 'verified' })]);
    await clean(w);
    await shoot(page, 'sync');
    await page.close();
  });

  test('sync health: a robot past the 72-hour alert comes first with a red pill, its disk pressure in words', async () => {
    // Episodes 72 hours old cannot be recorded in a test: the cloud's answer gets one more row.
    const w = await h.browser.newPage();
    const { page } = w;
    const late = 'rbt_late_robot';
    await page.route('**/v1/sync-health/robots*', async (route) => {
      const res = await route.fetch();
      const body = (await res.json()) as { robots: Record<string, unknown>[] };
      body.robots.push({
        robot_id: late,
        episodes_reported: 40,
        unverified: 7,
        unverified_over_72h: 3,
        bytes_unverified: 3 * 1024 ** 3,
        local_missing: 1,
        pressure: { free_bytes: 2 * 1024 ** 3, backlog_bytes: 3 * 1024 ** 3, hours_to_full: 10, reported_at: new Date().toISOString() },
      });
      await route.fulfill({ response: res, json: body });
    });
    await signIn(page, h.baseUrl, h.adminKey);
    await go(page, '/sync');
    const first = page.locator('table.health tbody tr').first();
    await first.getByText('3 over 72 h').waitFor();
    expect(await first.getAttribute('data-robot-id')).toBe(late);
    expect(await first.getAttribute('class')).toContain('alert-row');
    expect(await first.textContent()).toContain('10 h');
    expect(await page.locator('.health-summary').textContent()).toContain('1 robot with episodes unverified over 72 h');
    // Only robots with a backlog: the filter is in the URL.
    await page.getByLabel('Only robots with a backlog').check();
    expect(page.url()).toContain('backlog=1');
    expect(await page.locator('table.health tbody tr').first().getAttribute('data-robot-id')).toBe(late);
    await clean(w);
    await page.close();
  });

  test('routing rules: a rule with markup in its match shows as text, and a reorder by the buttons survives a reload', async () => {
    const w = await open('/sync');
    const { page } = w;
    const rows = page.locator('table.rules tbody tr');
    await rows.first().waitFor();
    await page.getByRole('button', { name: 'Add a rule' }).click();
    await page.getByLabel('Task id', { exact: true }).fill(XSS);
    await page.getByRole('checkbox', { name: 'success' }).check();
    await page.getByRole('button', { name: 'Add rule at the end' }).click();
    await expect.poll(() => rows.count()).toBe(2);
    expect(await rows.nth(1).getByText(XSS, { exact: true }).isVisible()).toBe(true);
    expect(await rows.nth(0).textContent()).toContain(robot);

    await page.getByRole('button', { name: 'Move rule 2 up' }).click();
    await expect.poll(async () => (await rows.nth(0).textContent()) ?? '').toContain(XSS);
    // Focus follows the moved rule (keyboard users keep their place).
    expect(await page.evaluate(() => document.activeElement?.closest('tr')?.textContent ?? '')).toContain(XSS);
    await clean(w);

    await page.reload();
    await rows.nth(1).waitFor();
    expect(await rows.nth(0).textContent()).toContain(XSS);
    expect(await rows.nth(1).textContent()).toContain(robot);
    const api = await h.cloud.client().routingRules.list();
    expect(api.routing_rules.map((r) => r.match.robot_id?.[0] ?? r.match.task_id?.[0])).toEqual([XSS, robot]);

    // Dragging a row onto another moves it there too.
    await rows.nth(1).dragTo(rows.nth(0));
    await expect.poll(async () => (await rows.nth(0).textContent()) ?? '').toContain(robot);
    await expect.poll(async () => (await h.cloud.client().routingRules.list()).routing_rules[0]?.match.robot_id).toEqual([robot]);
    await clean(w);
    await page.close();
  });

  test('webhooks: create (whsec_ shown once), send a test event, its row in the delivery log; markup in a URL shows as text; delete asks first', async () => {
    const w = await open('/webhooks');
    const { page } = w;
    await page.getByText('No webhook yet').waitFor();
    await clean(w);
    const url = `https://127.0.0.1:${receiver.port}/hook`;
    await page.getByRole('button', { name: 'Add a webhook' }).click();
    await page.getByLabel('Endpoint URL').fill(url);
    await clean(w);
    await page.getByRole('button', { name: 'Create webhook' }).click();
    const secret = await secretOnPage(page);
    expect(secret).toMatch(/^whsec_/);
    await page.getByRole('button', { name: 'Done, I have stored it' }).click();
    expect(await page.content()).not.toContain(secret);

    await page.getByRole('button', { name: `Send test to ${url}` }).click();
    await page.getByText('queued', { exact: false }).first().waitFor();
    const eventId = ((await page.locator('.notice code').first().textContent()) ?? '').trim();
    expect(eventId).toMatch(/^evt_/);
    await page.getByRole('link', { name: 'See its delivery' }).click();
    await page.getByText(`Test event ${eventId} delivered: HTTP 200`, { exact: false }).waitFor({ timeout: 60_000 });
    const row = page.locator(`table.deliveries tr[data-event-id="${eventId}"]`);
    expect(await row.textContent()).toContain('delivered');
    expect(deliveries.some((d) => d.eventId === eventId && d.body.test === true)).toBe(true);
    await clean(w);
    await shoot(page, 'webhook');

    // A subscription whose URL carries markup, then deleted through the confirmation.
    await go(page, '/webhooks');
    await page.getByRole('button', { name: 'Add a webhook' }).click();
    await page.getByLabel('Endpoint URL').fill(`https://127.0.0.1:1/${XSS}`);
    await page.getByRole('button', { name: 'Create webhook' }).click();
    await secretOnPage(page);
    await page.getByRole('button', { name: 'Done, I have stored it' }).click();
    const xssRow = page.locator('table.webhooks tbody tr', { hasText: XSS_URL });
    await xssRow.waitFor();
    await clean(w);
    await shoot(page, 'webhooks');
    await xssRow.getByRole('button', { name: /^Delete/ }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete webhook' }).click();
    await expect.poll(() => xssRow.count()).toBe(0);
    expect(await page.locator('table.webhooks tbody tr', { hasText: url }).count()).toBe(1);
    await clean(w);

    // An endpoint that answers 410: its test event is dead-lettered at once, and redelivered from the page.
    const gone = await h.cloud.client().webhooks.create({ url: `https://127.0.0.1:${receiver.port}/gone`, events: ['episode.verified'] });
    await go(page, `/webhooks/${gone.id}`);
    await page.getByRole('button', { name: 'Send a test event' }).click();
    await page.getByText('not delivered: HTTP 410', { exact: false }).waitFor({ timeout: 60_000 });
    expect(await page.locator('table.deliveries tbody tr').first().textContent()).toContain('dead-lettered');
    const letter = page.locator('table.dead-letters tbody tr').first();
    await letter.waitFor();
    const deadEvent = (await page.locator('table.deliveries tbody tr').first().getAttribute('data-event-id'))!;
    expect(await letter.textContent()).toContain(deadEvent);
    await clean(w);
    await letter.getByRole('button', { name: `Redeliver ${deadEvent}` }).click();
    await page.getByText(`Event ${deadEvent} is queued again.`).waitFor();
    await expect.poll(() => deliveries.filter((d) => d.eventId === deadEvent).length).toBe(2);
    await clean(w);
    await page.close();
  });

  test('API keys: create with data:read (the ak_ key shown once, the name with markup as text), revoke, and the revoked key cannot sign in', async () => {
    const w = await open('/keys');
    const { page } = w;
    await page.locator('table.keys tbody tr').first().waitFor();
    await page.getByRole('button', { name: 'Create a key' }).click();
    await page.getByLabel('Name', { exact: true }).fill(XSS);
    await page.getByRole('checkbox', { name: /^data:read/ }).check();
    await page.getByLabel('Expires', { exact: true }).selectOption('30');
    await clean(w);
    await page.getByRole('button', { name: 'Create key' }).click();
    const key = await secretOnPage(page);
    expect(key).toMatch(/^ak_/);
    const row = page.locator('table.keys tbody tr', { hasText: XSS });
    await row.waitFor();
    expect(await row.locator('.key-name').textContent()).toBe(XSS);
    expect(await row.textContent()).toContain('data:read');
    await clean(w);
    await page.getByRole('button', { name: 'Done, I have stored it' }).click();
    expect(await page.content()).not.toContain(key);
    await shoot(page, 'keys');

    await row.getByRole('button', { name: `Revoke ${XSS}` }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Revoke key' }).click();
    await expect.poll(() => row.count()).toBe(0);
    await page.getByLabel(/Show revoked and expired keys/).check();
    await row.getByText('revoked', { exact: true }).waitFor();
    await clean(w);
    await page.close();

    const other = await h.browser.newPage();
    await other.page.goto(`${h.baseUrl}/console/`);
    await other.page.getByLabel('API key', { exact: true }).fill(key);
    await other.page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await other.page.getByText('This key is not valid', { exact: false }).waitFor();
    expect(await checkA11y(other.page)).toEqual([]);
    await other.page.close();
  });

  test('a key revoked mid-session: the next page is the sign-in with the reason, and signing in again keeps the page and its filters', async () => {
    const created = await h.cloud.client().apiKeys.create({ name: 'revoked mid-session', scopes: ['data:read'] });
    const w = await open(`/sync?robot=${robot}&backlog=1`, created.key);
    const { page } = w;
    // A data:read key sees the health and no 403: destinations and rules are admin's.
    await page.getByText('Destinations and routing rules are shown to keys with the scope').waitFor();
    expect(await page.getByLabel('Robot', { exact: true }).inputValue()).toBe(robot);
    expect(await page.getByRole('alert').count()).toBe(0);
    await clean(w);
    await page.getByRole('link', { name: 'Plan and usage' }).click();
    await page.getByRole('heading', { name: 'Plan and usage', level: 1 }).waitFor();
    expect(await page.getByText('Usage per day is shown to keys with the scope').isVisible()).toBe(true);
    expect(await page.getByRole('alert').count()).toBe(0);

    await h.cloud.client().apiKeys.revoke(created.id);
    await page.goBack();
    await page.getByText('Your API key no longer works', { exact: false }).waitFor();
    expect(new URL(page.url()).pathname + new URL(page.url()).search).toBe(`/console/sync?robot=${robot}&backlog=1`);
    expect(await checkA11y(page)).toEqual([]);

    await page.getByLabel('API key', { exact: true }).fill(h.adminKey);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('heading', { name: 'Sync', level: 1 }).waitFor();
    expect(await page.getByLabel('Robot', { exact: true }).inputValue()).toBe(robot);
    expect(await page.getByLabel('Only robots with a backlog').isChecked()).toBe(true);
    expect(page.url()).toContain(`robot=${robot}`);
    expect(w.errors.filter((e) => !/401|Unauthorized/i.test(e))).toEqual([]);
    await page.close();
  });

  test('enrollment tokens: a past expiry refused at its field, create (the ret_ token shown once), listed with its prefix, uses and state, revoked, and then it enrolls nothing', async () => {
    const w = await open('/tokens');
    const { page } = w;
    await page.locator('table.tokens tbody tr').first().waitFor();
    await page.getByRole('button', { name: 'Create a token' }).click();
    // The API's 400 issue shows at its field: an expiry in the past, under the date picker.
    await page.getByLabel('Expires', { exact: true }).selectOption('date');
    await page.getByLabel('Expiry date and time (local)').fill('2001-01-01T10:00');
    await page.getByRole('button', { name: 'Create token' }).click();
    const dateField = page.locator('.field.has-error', { has: page.getByLabel('Expiry date and time (local)') });
    await dateField.getByRole('alert').waitFor();
    expect(await dateField.getByRole('alert').textContent()).toContain('expires_at');
    expect(await page.locator('.field.has-error').count()).toBe(1);
    expect(w.errors.splice(0)).toEqual([expect.stringContaining('status of 400')]);
    await clean(w);
    await page.getByLabel('Expires', { exact: true }).selectOption('24h');
    await page.getByLabel('Robots it may enroll').fill('2');
    await page.getByLabel('Robot name prefix (optional)').fill('arm');
    await clean(w);
    await page.getByRole('button', { name: 'Create token' }).click();
    const token = await secretOnPage(page);
    expect(token).toMatch(/^ret_/);
    expect(await page.locator('pre.command').textContent()).toContain(token);
    const row = page.locator('table.tokens tbody tr', { hasText: 'arm-1' });
    await row.waitFor();
    const prefix = ((await row.locator('code').first().textContent()) ?? '').replace(/…$/, '');
    expect(token.startsWith(prefix)).toBe(true);
    expect(await row.textContent()).toContain('0 of 2');
    expect(await row.textContent()).toContain('usable');
    await clean(w);
    await page.getByRole('button', { name: 'Done, I have stored it' }).click();
    await shoot(page, 'tokens');

    await row.getByRole('button', { name: /^Revoke/ }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Revoke token' }).click();
    await row.getByText('revoked', { exact: true }).first().waitFor();
    await clean(w);
    const res = await h.cloud.fetch('/v1/robots/enroll', { method: 'POST', key: null, json: { token } });
    expect(res.status).toBe(401);
    await page.close();
  });

  test('plan and usage: an admin key sees the plan and its meters per day over a date range kept in the URL', async () => {
    const w = await open('/usage');
    const { page } = w;
    await page.getByText('Tier', { exact: false }).first().waitFor();
    const usage = page.locator('table.usage');
    await usage.waitFor();
    expect(await usage.textContent()).toContain('api_keys.created');
    expect(await page.locator('ul.features').textContent()).toContain('data.metadata');
    const today = new Date().toISOString().slice(0, 10);
    await page.getByLabel('From (UTC)').fill(today);
    await page.getByRole('button', { name: 'Show' }).click();
    await expect.poll(() => page.url()).toContain(`from=${today}`);
    await usage.waitFor();
    await clean(w);
    await shoot(page, 'usage');
    await page.close();
  });
});
