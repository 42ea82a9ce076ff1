import { createHash, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { Page } from 'playwright-core';
import { FleetApiError, FleetClient, type Episode } from '@fleet/client';
import { GrantRequestEnvelopeSchema, topics, type EpisodeReport } from '@fleet/protocol';
import { createTestPki, startHttpsReceiver, type TestPki, type TestReceiver } from '../../cloud/src/egress/test-https.js';
import { checkA11y, DESKTOP, PHONE, screenshot, type WatchedPage } from '../../test/support/browser.js';
import { waitFor } from '../../test/support/wait.js';
import { applyReplicaEvent, episodeMatches, issueAt } from '../src/ui/episodes-filter.js';
import { signIn, startConsoleHarness, type ConsoleHarness } from './harness.js';
import { enrollScriptedRobot, type ScriptedRobot } from './scripted-robot.js';

/**
 * The episode and dataset pages in a real browser against a real cloud whose simulated robots
 * record episodes on the API's command: filtering (in the URL, kept by a reload, a bad value shown
 * at its field), paging both ways, annotations and outcome overrides with their history, a
 * dataset made from a filter, snapshotted and its manifest saved both ways the page can (the
 * File System Access API, stubbed, and the blob link), the live "new episodes match" notice,
 * stored markup rendered as text, and a data:read key that meets no enabled write action and no
 * 403. One cloud for the file; the tests build on the episodes recorded in beforeAll.
 * CONSOLE_SHOTS_DIR=<dir> also writes screenshots.
 */

const XSS = '<img src=x onerror=window.__xss=1>';
const SHOTS = process.env.CONSOLE_SHOTS_DIR;

let h: ConsoleHarness;
let api: FleetClient;
let readKey: string;
/** The simulated robot: records real episodes on the API's commands (the live test). */
let simRobot: string;
/** A robot this file scripts: its episode reports carry the facts the tests filter on. */
let scripted: ScriptedRobot & { grants: Map<string, string> };
/** A grant provider on 127.0.0.1 (a certificate of the test CA): it grants the live sync test's episode and defers every other. */
let pki: TestPki;
let provider: TestReceiver;
/** Reported in beforeAll. */
const recorded: { pick: string[]; failed: string; place: string; markup: string } = { pick: [], failed: '', place: '', markup: '' };

const SEGMENTS = [
  { segment_index: 0, subtask_id: 'reach', subtask_name: 'Reach the part', start_offset_s: 0, end_offset_s: 2.5 },
  { segment_index: 1, subtask_id: 'grasp', subtask_name: 'Grasp', start_offset_s: 2.5, end_offset_s: 4 },
  { segment_index: 2, subtask_id: 'place', subtask_name: 'Place in the bin', start_offset_s: 4, end_offset_s: 9.5 },
];
const FILES = [
  { path: 'recording.mcap', size_bytes: 266_240, sha256: createHash('sha256').update('recording').digest('hex') },
  { path: 'camera/front.mcap', size_bytes: 1_048_576, sha256: createHash('sha256').update('front').digest('hex') },
];
let reportSeq = 0;
const RUN = Date.now().toString(36);

/**
 * Sends an episode report as the scripted robot does (the outbox message a real agent sends when
 * an episode is finalized) and waits for the cloud's acknowledgment: it is then in the index.
 */
async function report(over: Partial<EpisodeReport>): Promise<string> {
  reportSeq += 1;
  const id = `ep_console${RUN}x${reportSeq}`;
  const started = Date.now() - 3_600_000 + reportSeq * 1000;
  const body: EpisodeReport = {
    id,
    recording_session_id: 'rs_console_bench',
    episode_seq: reportSeq,
    session_name: 'Bench session',
    task_id: null,
    task_name: null,
    subtask_id: null,
    operator_id: 'op_ada',
    operator_name: 'Ada',
    control_mode: 'teleop',
    policy_version_id: null,
    eval_id: null,
    outcome: 'success',
    started_at: new Date(started).toISOString(),
    ended_at: new Date(started + 9_500).toISOString(),
    duration_s: 9.5,
    message_count: 1200,
    bag_size_bytes: FILES.reduce((n, f) => n + f.size_bytes, 0),
    metadata: {},
    segments: SEGMENTS,
    manifest: { files: FILES, total_bytes: FILES.reduce((n, f) => n + f.size_bytes, 0) },
    ...over,
  };
  await outbox('episode.report', `m-${id}`, body);
  return id;
}

/** Publishes one outbox message as the scripted robot and waits for the cloud's acknowledgment. */
async function outbox(kind: string, msgId: string, body: unknown): Promise<void> {
  const ack = await scripted.outbox(kind, msgId, body);
  expect(ack, msgId).toMatchObject({ ok: true });
}

/**
 * A grant for (episode, destination) as the scripted robot gets one: it asks the cloud over MQTT
 * until the episode is routed there and the relay hands over the provider's grant.
 */
async function grantFor(episodeId: string, destinationId: string): Promise<string> {
  return waitFor(
    async () => {
      reportSeq += 1;
      const reqId = `req-${RUN}-${reportSeq}`;
      await scripted.client.publishAsync(topics.syncRequest(scripted.robotId), JSON.stringify({ type: 'grant.request', req_id: reqId, episode_id: episodeId, destination_id: destinationId }), { qos: 1 });
      return waitFor(() => scripted.grants.get(reqId), { timeoutMs: 2_000, description: `the grant of ${reqId}` }).catch(() => undefined);
    },
    { timeoutMs: 30_000, description: `a grant for ${episodeId} at ${destinationId}` },
  );
}

/** A replica state as a robot reports it after an upload step (or a failed attempt), under the grant it was given. */
async function replicaState(episodeId: string, destinationId: string, grantId: string, state: 'syncing' | 'synced' | 'verified', error: string | null = null): Promise<void> {
  reportSeq += 1;
  await outbox('replica.state', `r-${RUN}-${reportSeq}`, { episode_id: episodeId, destination_id: destinationId, grant_id: grantId, state, error, object_key: `bench/${episodeId}/`, at: Date.now() + reportSeq });
}

/** Records one episode on the simulated robot through the API's robot commands. */
async function record(robot: string): Promise<string> {
  // The robot takes a new recording once the last one is finalized.
  await waitFor(async () => ((await api.robots.get(robot)).recording_state === 'idle' ? true : undefined), { timeoutMs: 30_000, description: `${robot} idle` });
  const started = await api.robots.startEpisode(robot);
  const id = String((started.result as { episode_id?: string }).episode_id);
  await api.robots.finishEpisode(robot);
  await waitFor(() => api.episodes.get(id).then(() => true, () => undefined), { timeoutMs: 60_000, intervalMs: 200, description: `${id} in the index` });
  return id;
}

beforeAll(async () => {
  pki = createTestPki();
  provider = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res) => {
    // The episode page's player asks for read links once a replica is verified: not this provider.
    if (req.headers['x-service-event'] === 'read.request') {
      res.writeHead(501).end();
      return;
    }
    const env = GrantRequestEnvelopeSchema.parse(JSON.parse(req.body));
    res.writeHead(200, { 'content-type': 'application/json' });
    // The simulated robot asks too (a lone destination routes every episode): it waits.
    if (env.episode_id !== recorded.place) {
      res.end(JSON.stringify({ grant_id: null, destinations: [], retention: { local: 'keep' }, retry_after: 3600 }));
      return;
    }
    res.end(
      JSON.stringify({
        grant_id: `g-${env.request.destination_id}-${env.episode_id}-${randomUUID()}`,
        expires_at: new Date(Date.now() + 3_600_000).toISOString(),
        retry_after: null,
        retention: { local: 'keep' },
        destinations: [
          {
            destination_id: env.request.destination_id,
            protocol: 'http-put',
            object_key: `bench/${env.episode_id}/`,
            files: env.request.manifest.files.map((f) => ({ path: f.path, put_url: `https://uploads.example.com/${env.episode_id}/${f.path}` })),
          },
        ],
      }),
    );
  });
  h = await startConsoleHarness({ robots: 1, subtaskMs: 150, cloudArgs: ['--egress-allow-loopback', '--egress-ca-file', pki.caFile] });
  simRobot = h.robots[0]!;
  api = new FleetClient({ baseUrl: h.baseUrl, apiKey: h.adminKey });
  const grants = new Map<string, string>();
  const robot = await enrollScriptedRobot(api, h.cloud.mqtt, {
    name: 'scripted-arm',
    subscribe: (id) => [topics.sync(id)],
    onMessage: (_topic, payload) => {
      const m = JSON.parse(payload.toString()) as { type: string; req_id?: string; grant_id?: string };
      if (m.type === 'grant' && m.req_id && m.grant_id) grants.set(m.req_id, m.grant_id);
    },
  });
  scripted = Object.assign(robot, { grants });

  recorded.pick.push(await report({ task_id: 'pick', task_name: 'Pick the part', metadata: { site: 'lab', shift: 1 } }));
  recorded.pick.push(await report({ task_id: 'pick', task_name: 'Pick the part', metadata: { site: 'yard' } }));
  recorded.pick.push(await report({ task_id: 'pick', task_name: 'Pick the part', metadata: { site: 'lab', shift: 2 } }));
  recorded.failed = await report({ task_id: 'pick', task_name: 'Pick the part', outcome: 'failure', metadata: { site: 'lab' } });
  recorded.place = await report({ task_id: 'place', task_name: 'Place', metadata: { site: 'lab' } });
  recorded.markup = await report({ task_id: 'inspect', metadata: { note: XSS } });
  readKey = (await api.apiKeys.create({ name: 'episodes reader', scopes: ['data:read'] })).key;
}, 240_000);

afterAll(async () => {
  await scripted?.close();
  await h?.[Symbol.asyncDispose]();
  await provider?.close();
  pki?.cleanup();
});

/** Pages of the running test, closed after it (each holds an event stream: a browser keeps at most 6 connections to one origin). */
const pages: Page[] = [];
afterEach(async () => {
  await Promise.all(pages.splice(0).map((p) => p.close().catch(() => undefined)));
});

async function newPage(viewport: { width: number; height: number } = DESKTOP): Promise<WatchedPage> {
  const w = await h.browser.newPage({ viewport });
  pages.push(w.page);
  return w;
}

async function open(path: string, opts: { key?: string; viewport?: { width: number; height: number } } = {}): Promise<WatchedPage> {
  const w = await newPage(opts.viewport);
  await signIn(w.page, h.baseUrl, opts.key ?? h.adminKey);
  await w.page.goto(`${h.baseUrl}/console${path}`);
  await w.page.getByRole('heading', { level: 1 }).first().waitFor();
  return w;
}

async function shot(page: Page, name: string, fullPage = true): Promise<void> {
  if (SHOTS) await screenshot(page, SHOTS, name, { fullPage });
}

/** The episode ids of the list as the page shows them, in order. */
async function shownIds(page: Page): Promise<string[]> {
  return page.locator('table.episodes-table:not(.new) tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-episode') ?? ''));
}

async function apiIds(filter: Record<string, string>, limit = 100): Promise<string[]> {
  return (await api.episodes.list(filter as never, { limit })).episodes.map((e) => e.id);
}

async function settled(page: Page): Promise<void> {
  await expect.poll(() => page.getByRole('status').filter({ hasText: /…$/ }).count()).toBe(0);
}

/**
 * No serious accessibility violation and no page error; `expected` names the failed requests the
 * test provoked on purpose (the browser logs each answer of 400 as a console error).
 */
async function clean(w: WatchedPage, expected: readonly RegExp[] = []): Promise<void> {
  await settled(w.page);
  expect(await checkA11y(w.page)).toEqual([]);
  expect(w.errors.filter((e) => !(/status of (400|501)/.test(e) && expected.some((re) => re.test(e))))).toEqual([]);
}

describe('episodes list', () => {
  test('filters: the filter lands in the URL, a reload keeps it; a bad value shows at its field; columns are remembered', async () => {
    const w = await open('/episodes');
    const { page } = w;
    const all = await apiIds({});
    await expect.poll(() => shownIds(page)).toEqual(all);
    await shot(page, 'episodes');

    const form = page.getByRole('form', { name: 'Episode filter' });
    await form.getByLabel('Task', { exact: true }).fill('pick');
    await form.getByLabel('Outcome', { exact: true }).selectOption('success');
    await form.getByRole('button', { name: 'Add key filter' }).click();
    await page.locator('#ek-layer-0').selectOption('metadata');
    await page.locator('#ek-key-0').fill('site');
    await page.locator('#ek-value-0').fill('lab');
    await page.getByRole('button', { name: 'Apply filter' }).click();
    const want = await apiIds({ task_id: 'pick', outcome: 'success', 'metadata.site': 'lab' });
    expect(want.length).toBe(2);
    await expect.poll(() => shownIds(page)).toEqual(want);
    const url = new URL(page.url());
    expect(url.pathname).toBe('/console/episodes');
    expect(Object.fromEntries(url.searchParams)).toEqual({ task_id: 'pick', outcome: 'success', 'metadata.site': 'lab' });
    expect(page.url()).not.toContain(h.adminKey);

    await page.reload();
    await expect.poll(() => shownIds(page)).toEqual(want);
    expect(await form.getByLabel('Task', { exact: true }).inputValue()).toBe('pick');
    expect(await page.locator('#ek-key-0').inputValue()).toBe('site');
    expect(await page.locator('#ek-value-0').inputValue()).toBe('lab');

    // Columns: the choice survives a reload (localStorage).
    expect(await page.getByRole('columnheader', { name: 'Operator' }).count()).toBe(0);
    const picker = page.locator('.column-picker');
    await picker.getByText('Columns', { exact: true }).click();
    await picker.getByLabel('Operator', { exact: true }).check();
    await expect.poll(() => page.getByRole('columnheader', { name: 'Operator' }).count()).toBe(1);
    await page.reload();
    await expect.poll(() => shownIds(page)).toEqual(want);
    expect(await page.getByRole('columnheader', { name: 'Operator' }).count()).toBe(1);
    await clean(w);
    await page.setViewportSize(PHONE);
    await shot(page, 'episodes-phone');
    expect(await checkA11y(page)).toEqual([]);
    await page.setViewportSize(DESKTOP);

    // A value the API refuses: the 400 is shown at that field, with the request id.
    await form.getByLabel('Started from', { exact: true }).fill('yesterday');
    await page.getByRole('button', { name: 'Apply filter' }).click();
    const fieldError = page.locator('#ef-from-error');
    await expect.poll(() => fieldError.textContent()).toContain('date-time');
    expect(await form.getByLabel('Started from', { exact: true }).getAttribute('aria-invalid')).toBe('true');
    expect(await page.getByRole('alert').filter({ hasText: 'request_id' }).count()).toBeGreaterThan(0);
    await shot(page, 'episodes-field-error', false);
    await clean(w, [/\/v1\/episodes\?.*from=yesterday/]);
  });

  test('pages forward with the cursor in the URL and back through the cursors that led there', async () => {
    const w = await open('/episodes?limit=2');
    const { page } = w;
    const all = await apiIds({});
    expect(all.length).toBeGreaterThanOrEqual(5);
    await expect.poll(() => shownIds(page)).toEqual(all.slice(0, 2));
    await page.getByRole('button', { name: 'Next' }).click();
    await expect.poll(() => shownIds(page)).toEqual(all.slice(2, 4));
    expect(new URL(page.url()).searchParams.get('cursor')).toBeTruthy();
    await page.getByRole('button', { name: 'Next' }).click();
    await expect.poll(() => shownIds(page)).toEqual(all.slice(4, 6));
    const third = page.url();
    await page.getByRole('button', { name: 'Previous' }).click();
    await expect.poll(() => shownIds(page)).toEqual(all.slice(2, 4));
    await page.getByRole('button', { name: 'Previous' }).click();
    await expect.poll(() => shownIds(page)).toEqual(all.slice(0, 2));
    expect(new URL(page.url()).searchParams.get('cursor')).toBeNull();
    expect(await page.getByRole('button', { name: 'Previous' }).isDisabled()).toBe(true);
    // A shared link to a later page opens that page.
    await page.goto(third);
    await expect.poll(() => shownIds(page)).toEqual(all.slice(4, 6));
    await page.getByRole('button', { name: 'First page' }).click();
    await expect.poll(() => shownIds(page)).toEqual(all.slice(0, 2));
    await clean(w);
  });

  test('a new finished episode makes "1 new episode matches" appear without a reload; Show lists it', async () => {
    const since = new Date(Date.now() - 1000).toISOString();
    const w = await open(`/episodes?${new URLSearchParams({ robot_id: simRobot, from: since }).toString()}`);
    const { page } = w;
    await page.getByText('No episode matches this filter.').waitFor();
    await expect.poll(() => page.locator('.live-dot.live').count()).toBe(1);
    // One that does not match (another robot), then one that does, finished on the simulated robot.
    await report({ task_id: 'pick', metadata: { site: 'lab' } });
    const late = await record(simRobot);
    await page.getByText('1 new episode matches this filter.').waitFor();
    await shot(page, 'episodes-new', false);
    await page.getByRole('button', { name: 'Show', exact: true }).click();
    await expect.poll(() => shownIds(page)).toEqual([late]);
    await expect.poll(() => page.getByText(/new episodes? match/).count()).toBe(0);
    await clean(w);
  });
});

describe('live sync state', () => {
  test('a row of the list and the replicas of an episode move with episode.failed, synced and verified, without a reload', async () => {
    // A lone destination (every episode routes to it; its provider grants only this one), then a
    // rule for this episode alone: the robot's reports, under the grant the relay handed it, are
    // what moves the replica.
    const id = recorded.place;
    const d1 = await api.destinations.create({ type: 'external', url: `https://localhost:${provider.port}/fleet` });
    await api.routingRules.create({ destination_id: d1.id, match: { episode_id: id } });
    const list = await open('/episodes?task_id=place');
    const row = list.page.locator(`tr[data-episode="${id}"]`);
    await expect.poll(() => row.locator('.pill').last().textContent()).toBe('not routed');
    const detail = await open(`/episodes/${id}`);
    const replicas = detail.page.getByRole('region', { name: 'Replicas' });
    await replicas.getByText('No destination yet').waitFor();
    // A mark a reload would wipe.
    await list.page.evaluate(() => void ((globalThis as { __mark?: number }).__mark = 1));
    // A grant is no event: the pages stay as they are until the robot reports.
    const grantId = await grantFor(id, d1.id);

    await replicaState(id, d1.id, grantId, 'syncing', 'upload_failed: the store answered HTTP 500');
    await expect.poll(() => row.locator('.pill').last().textContent()).toBe('failed');
    const replicaRow = replicas.locator(`tr[data-destination="${d1.id}"]`);
    await expect.poll(() => replicaRow.textContent()).toContain('the store answered HTTP 500');
    expect(await replicaRow.textContent()).toContain('upload_failed');
    expect(await replicaRow.textContent()).toContain(grantId);
    expect(await replicaRow.textContent()).toContain(`bench/${id}/`);
    await replicaState(id, d1.id, grantId, 'synced');
    await expect.poll(() => row.locator('.pill').last().textContent()).toBe('synced');
    await expect.poll(() => replicaRow.textContent()).toContain('synced');
    await replicaState(id, d1.id, grantId, 'verified');
    await expect.poll(() => row.locator('.pill').last().textContent()).toBe('verified');
    await expect.poll(() => replicaRow.textContent()).toContain('verified');
    // Nothing was reloaded: the list page still has the rows it loaded.
    expect(await list.page.evaluate(() => (globalThis as { __mark?: number }).__mark)).toBe(1);
    // Verified: the player asks for read links, which this destination's provider does not issue.
    await detail.page.locator('[data-problem="unsupported"]').waitFor();
    await shot(detail.page, 'episode-replicas');
    await clean(list);
    await clean(detail, [/read-links/]);
  });
});

describe('episode detail', () => {
  test('annotates, overrides the outcome twice with reasons in the history, draws the segments and lists the files', async () => {
    const id = recorded.pick[0]!;
    const w = await open(`/episodes/${id}`);
    const { page } = w;
    const recordedPanel = page.getByRole('region', { name: 'Recorded by the robot' });
    const notes = page.getByRole('region', { name: 'Annotations (editable)' });
    await recordedPanel.waitFor();
    await notes.waitFor();
    const ep = await api.episodes.get(id);
    expect(await recordedPanel.getByText(ep.robot_id).count()).toBeGreaterThan(0);
    expect(await recordedPanel.getByRole('row', { name: /site lab/ }).count()).toBe(1);

    // Files of the manifest and the segments, as the API has them.
    const files = await api.episodes.files(id);
    expect(files.files.length).toBeGreaterThan(0);
    await expect.poll(() => page.locator('table.files tbody tr').count()).toBe(files.files.length);
    expect(await page.locator('table.files').textContent()).toContain(files.files[0]!.sha256);
    const segments = (await api.episodes.segments(id)).segments;
    expect(segments.length).toBeGreaterThan(0);
    await expect.poll(() => page.locator('table.segments tbody tr').count()).toBe(segments.length);
    expect(await page.locator('svg.ep-timeline-svg rect.seg').count()).toBe(segments.length);
    expect(await page.getByRole('img', { name: /segment/ }).count()).toBe(1);

    // Annotations: add, change, add JSON, delete.
    await notes.getByLabel('Key', { exact: true }).fill('qa');
    await notes.getByLabel('Value', { exact: true }).fill('approved');
    await notes.getByRole('button', { name: 'Add annotation' }).click();
    await notes.locator('tr[data-annotation="qa"]').waitFor();
    await expect.poll(async () => (await api.episodes.get(id)).annotations).toEqual({ qa: 'approved' });
    await notes.getByRole('button', { name: 'Change qa' }).click();
    await notes.getByLabel('New value of qa').fill('rejected');
    await notes.getByRole('button', { name: 'Save' }).click();
    await expect.poll(async () => (await api.episodes.get(id)).annotations).toEqual({ qa: 'rejected' });
    await notes.getByLabel('Key', { exact: true }).fill('grade');
    await notes.getByLabel('Value', { exact: true }).fill('{"score": 3}');
    await notes.getByLabel('As', { exact: true }).selectOption('json');
    await notes.getByRole('button', { name: 'Add annotation' }).click();
    await expect.poll(async () => (await api.episodes.get(id)).annotations).toEqual({ qa: 'rejected', grade: { score: 3 } });
    await notes.getByRole('button', { name: 'Delete qa' }).click();
    await expect.poll(async () => (await api.episodes.get(id)).annotations).toEqual({ grade: { score: 3 } });
    await expect.poll(() => notes.locator('tr[data-annotation="qa"]').count()).toBe(0);

    // Errors at the field: JSON that does not parse (the page), a value over the API's 64 KiB (the API).
    await notes.getByLabel('Key', { exact: true }).fill('bad');
    await notes.getByLabel('Value', { exact: true }).fill('{not json');
    await notes.getByRole('button', { name: 'Add annotation' }).click();
    await expect.poll(() => notes.locator('#an-new-value-error').textContent()).toContain('not valid JSON');
    await notes.getByLabel('As', { exact: true }).selectOption('text');
    await notes.getByLabel('Value', { exact: true }).fill('x'.repeat(70_000));
    await notes.getByRole('button', { name: 'Add annotation' }).click();
    await expect.poll(() => notes.locator('#an-new-value-error').textContent()).toContain('exceed');
    expect((await api.episodes.get(id)).annotations).toEqual({ grade: { score: 3 } });
    await notes.getByLabel('Key', { exact: true }).fill('');
    await notes.getByLabel('Value', { exact: true }).fill('');

    // Outcome overridden twice; the history lists both with their reasons.
    await notes.getByLabel('New outcome').selectOption('failure');
    await notes.getByLabel(/^Reason/).fill('dropped the part');
    await notes.getByRole('button', { name: 'Override outcome' }).click();
    await expect.poll(() => notes.locator('table.history tbody tr').count()).toBe(1);
    await notes.getByLabel('New outcome').selectOption('success');
    await notes.getByLabel(/^Reason/).fill('placed after all');
    await notes.getByRole('button', { name: 'Override outcome' }).click();
    await expect.poll(() => notes.locator('table.history tbody tr').count()).toBe(2);
    const history = (await api.episodes.outcomeHistory(id)).outcome_history;
    expect(history.map((c) => [c.from, c.to, c.reason])).toEqual([
      ['success', 'failure', 'dropped the part'],
      ['failure', 'success', 'placed after all'],
    ]);
    const rows = await notes.locator('table.history tbody tr').allTextContents();
    expect(rows[0]).toContain('success → failure');
    expect(rows[0]).toContain('dropped the part');
    expect(rows[1]).toContain('failure → success');
    expect(rows[1]).toContain('placed after all');
    // What the robot reported stays in its panel.
    expect(await recordedPanel.getByText('Outcome as reported').count()).toBe(1);

    await shot(page, 'episode');
    await clean(w, [new RegExp(`/v1/episodes/${id}\\)`)]);
    await page.setViewportSize(PHONE);
    await shot(page, 'episode-phone');
    if (SHOTS) {
      await notes.screenshot({ path: `${SHOTS}/episode-phone-annotations.png` });
      await page.locator('section[aria-labelledby="timeline-title"]').screenshot({ path: `${SHOTS}/episode-phone-segments.png` });
    }
    expect(await checkA11y(page)).toEqual([]);
  });

  test('stored markup in metadata, annotations, outcome reasons and dataset names renders as text', async () => {
    const id = recorded.markup;
    await api.episodes.annotate(id, { annotations: { [XSS]: XSS } });
    await api.episodes.setOutcome(id, { outcome: 'failure', reason: XSS });
    const ds = await api.datasets.create({ name: XSS, description: XSS, filter: { [`annotation.${XSS}`]: XSS } });
    const w = await open(`/episodes/${id}`);
    const { page } = w;
    await page.locator('table.history tbody tr').first().waitFor();
    // Metadata value, annotation key and value, outcome reason: each shown as the literal text.
    expect(await page.getByText(XSS, { exact: true }).count()).toBeGreaterThanOrEqual(4);
    await page.goto(`${h.baseUrl}/console/datasets`);
    await page.locator(`tr[data-dataset="${ds.id}"]`).waitFor();
    expect(await page.locator(`tr[data-dataset="${ds.id}"]`).getByText(XSS, { exact: true }).count()).toBe(1);
    await page.goto(`${h.baseUrl}/console/datasets/${ds.id}`);
    await page.getByRole('heading', { level: 1, name: XSS }).waitFor();
    expect(await apiIds({ [`annotation.${XSS}`]: XSS })).toEqual([id]);
    await page.goto(`${h.baseUrl}/console/episodes?${new URLSearchParams({ [`annotation.${XSS}`]: XSS }).toString()}`);
    await expect.poll(() => shownIds(page)).toEqual([id]);
    expect(await page.locator('img').count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as { __xss?: unknown }).__xss)).toBeUndefined();
    await clean(w);
  });
});

describe('datasets', () => {
  test('a dataset made from the episode filter, snapshotted, and its manifest saved: the same lines as the API, both ways', async () => {
    const w = await open('/episodes?task_id=pick');
    const { page } = w;
    await expect.poll(() => shownIds(page)).toEqual(await apiIds({ task_id: 'pick' }));
    await page.getByRole('button', { name: 'Create dataset from this filter' }).click();
    await page.getByLabel('Dataset name').fill('picks from the console');
    await page.getByRole('button', { name: 'Create dataset', exact: true }).click();
    await page.waitForURL(/\/console\/datasets\/ds_/);
    const id = decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!);
    const ds = await api.datasets.get(id);
    expect(ds).toMatchObject({ name: 'picks from the console', filter: { task_id: 'pick' }, snapshot_at: null });
    const live = await api.datasets.count(id);
    // Failures count; only discarded and evaluation episodes would be left out (there are none).
    const picks = (await apiIds({ task_id: 'pick' })).length;
    expect(live).toMatchObject({ live: true, episode_count: picks });
    await expect.poll(() => page.locator('.live-count').textContent()).toBe(String(picks));
    expect(await page.getByRole('button', { name: 'Download manifest' }).isDisabled()).toBe(true);
    await shot(page, 'dataset-live');
    await clean(w);

    // The live count follows a new matching episode.
    await report({ task_id: 'pick', task_name: 'Pick the part' });
    await expect.poll(() => page.locator('.live-count').textContent(), { timeout: 30_000 }).toBe(String(picks + 1));

    await page.getByRole('button', { name: 'Snapshot…' }).click();
    const dialog = page.getByRole('dialog');
    await dialog.getByText('pinned for good').waitFor();
    await dialog.getByRole('button', { name: 'Snapshot now' }).click();
    await page.getByRole('status').filter({ hasText: 'Snapshot taken' }).waitFor();
    const snapped = await api.datasets.get(id);
    expect(snapped.episode_count).toBe(picks + 1);
    // Gone with the answer, before the dataset is read again (a second snapshot would be a 409).
    expect(await page.getByRole('button', { name: 'Snapshot…' }).count()).toBe(0);
    await expect.poll(() => page.getByText(`${picks + 1} episodes pinned at`).count()).toBe(1);
    await shot(page, 'dataset-snapshotted');

    const expected: unknown[] = [];
    for await (const line of api.datasets.manifest(id)) expected.push(line.kind === 'header' ? line.header : line.episode);
    expect(expected.length).toBe(picks + 2);

    // Without the File System Access API: a link download of the pages' blobs.
    await page.evaluate(() => {
      (globalThis as { showSaveFilePicker?: unknown }).showSaveFilePicker = undefined;
    });
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download manifest' }).click()]);
    expect(download.suggestedFilename()).toBe(`picks-from-the-console-${id}-manifest.ndjson`);
    const text = await readFile((await download.path()), 'utf8');
    expect(text.endsWith('\n')).toBe(true);
    expect(text.trimEnd().split('\n').map((l) => JSON.parse(l) as unknown)).toEqual(expected);
    await page.getByText('as a download').waitFor();

    // With it (stubbed: a headless browser has no file dialog): the lines go to the writable in order.
    await page.evaluate(() => {
      const g = globalThis as { showSaveFilePicker?: unknown; __written?: string[]; __closed?: boolean; __suggested?: string };
      g.__written = [];
      g.showSaveFilePicker = async (o: { suggestedName: string }) => {
        g.__suggested = o.suggestedName;
        return {
          createWritable: async () => ({
            write: async (s: string) => void g.__written!.push(s),
            close: async () => void (g.__closed = true),
            abort: async () => undefined,
          }),
        };
      };
    });
    await page.getByRole('button', { name: 'Download manifest' }).click();
    await page.getByText('to the file you chose').waitFor();
    const written = await page.evaluate(() => {
      const g = globalThis as { __written?: string[]; __closed?: boolean; __suggested?: string };
      return { text: g.__written!.join(''), closed: g.__closed, suggested: g.__suggested };
    });
    expect(written.closed).toBe(true);
    expect(written.suggested).toBe(`picks-from-the-console-${id}-manifest.ndjson`);
    expect(written.text.trimEnd().split('\n').map((l) => JSON.parse(l) as unknown)).toEqual(expected);
    await shot(page, 'dataset-snapshot');
    await clean(w);
    await page.setViewportSize(PHONE);
    await shot(page, 'dataset-phone');
    expect(await checkA11y(page)).toEqual([]);
    await page.setViewportSize(DESKTOP);

    // The list shows it, pinned.
    await page.goto(`${h.baseUrl}/console/datasets`);
    const row = page.locator(`tr[data-dataset="${id}"]`);
    await row.waitFor();
    expect(await row.textContent()).toContain('snapshot');
    await shot(page, 'datasets');
    await clean(w);
    await page.setViewportSize(PHONE);
    await shot(page, 'datasets-phone');
  });

  test('the create form refuses an unknown filter key at the filter field', async () => {
    const w = await open('/datasets');
    const { page } = w;
    await page.getByRole('button', { name: 'New dataset' }).click();
    await page.getByLabel('Name', { exact: true }).fill('typo');
    await page.getByLabel('Filter (JSON)').fill('{"taks_id": "pick"}');
    await page.getByRole('button', { name: 'Create dataset' }).click();
    await expect.poll(() => page.locator('#ds-filter-error').textContent()).toContain('unknown key: taks_id');
    await page.getByLabel('Filter (JSON)').fill('{"task_id": "place"}');
    await page.getByRole('button', { name: 'Create dataset' }).click();
    await page.waitForURL(/\/console\/datasets\/ds_/);
    await expect.poll(() => page.locator('.live-count').textContent()).toBe('1');
    await clean(w, [/\/v1\/datasets\)/]);
  });
});

describe('a data:read key', () => {
  test('sees no enabled write action and meets no 403 on the episode and dataset pages', async () => {
    const snapped = (await api.datasets.list({ limit: 100 })).datasets.find((d) => d.snapshot_at !== null)!;
    const liveDs = await api.datasets.create({ name: 'still live', filter: { outcome: 'failure' } });
    const w = await newPage();
    const forbidden: string[] = [];
    w.page.on('response', (r) => {
      if (r.status() === 403) forbidden.push(r.url());
    });
    await signIn(w.page, h.baseUrl, readKey);
    const { page } = w;
    const visit = async (path: string, ready: () => Promise<unknown>) => {
      await page.goto(`${h.baseUrl}/console${path}`);
      await ready();
      await settled(page);
    };
    const writeButtons = ['Create dataset from this filter', 'Override outcome', 'Add annotation', 'Change grade', 'Delete grade', 'New dataset', 'Snapshot…'];
    const enabledWrites = async () => {
      const found: string[] = [];
      for (const name of writeButtons) {
        for (const b of await page.getByRole('button', { name: new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`) }).all()) if (await b.isEnabled()) found.push(name);
      }
      return found;
    };

    await visit('/episodes', () => expect.poll(() => shownIds(page).then((ids) => ids.length)).toBeGreaterThan(0));
    expect(await page.getByRole('button', { name: /^Create dataset from this filter/ }).isDisabled()).toBe(true);
    expect(await page.getByRole('button', { name: /^Create dataset from this filter/ }).getAttribute('title')).toContain('data:write');
    expect(await enabledWrites()).toEqual([]);
    await clean(w);

    await visit(`/episodes/${recorded.pick[0]}`, () => page.locator('table.files tbody tr').first().waitFor());
    expect(await page.getByRole('button', { name: /^Override outcome/ }).isDisabled()).toBe(true);
    expect(await page.getByRole('button', { name: /^Change grade/ }).isDisabled()).toBe(true);
    expect(await enabledWrites()).toEqual([]);
    await shot(page, 'episode-read-only');
    await clean(w);

    await visit('/datasets', () => page.locator('table.datasets-table tbody tr').first().waitFor());
    expect(await enabledWrites()).toEqual([]);
    await clean(w);

    await visit(`/datasets/${liveDs.id}`, () => expect.poll(() => page.locator('.live-count').textContent()).toMatch(/^\d+$/));
    expect(await page.getByRole('button', { name: /^Snapshot/ }).isDisabled()).toBe(true);
    expect(await enabledWrites()).toEqual([]);
    await clean(w);

    await visit(`/datasets/${snapped.id}`, () => page.getByRole('heading', { level: 1, name: snapped.name }).waitFor());
    expect(await page.getByRole('button', { name: 'Download manifest' }).isEnabled()).toBe(true);
    expect(await enabledWrites()).toEqual([]);
    await clean(w);

    expect(forbidden).toEqual([]);
  });
});

describe('page logic (no browser)', () => {
  const base: Episode = {
    id: 'ep_1', robot_id: 'rbt_1', recording_session_id: 'rs', episode_seq: 1, session_name: null, task_id: 'pick', task_name: null, subtask_id: null,
    operator_id: null, operator_name: null, outcome: 'success', recorded_outcome: 'success', control_mode: 'teleop', policy_version_id: null, eval_id: null,
    started_at: '2026-01-02T00:00:00.000Z', ended_at: null, duration_s: null, message_count: null, bag_size_bytes: null, bag_uri: null,
    metadata: { site: 'lab', shift: 2, ok: true }, annotations: { qa: 'approved' }, reported_at: '2026-01-02T00:00:01.000Z',
    replicas: [{ destination_id: 'dst_a', state: 'synced', grant_id: 'g1', error: null, updated_at: '2026-01-02T00:00:02.000Z' }],
  };

  test('a new episode is matched against the filter as the API would', () => {
    expect(episodeMatches(base, {})).toBe(true);
    expect(episodeMatches(base, { task_id: 'pick', outcome: 'success', 'metadata.site': 'lab', 'metadata.shift': '2', 'metadata.ok': 'true', 'annotation.qa': 'approved' })).toBe(true);
    expect(episodeMatches(base, { task_id: 'place' })).toBe(false);
    expect(episodeMatches(base, { subtask_id: 'x' })).toBe(false);
    expect(episodeMatches(base, { 'metadata.site': 'yard' })).toBe(false);
    expect(episodeMatches(base, { 'metadata.missing': 'x' })).toBe(false);
    expect(episodeMatches(base, { from: '2026-01-01T00:00:00Z', to: '2026-01-03T00:00:00Z' })).toBe(true);
    expect(episodeMatches(base, { from: '2026-01-03T00:00:00Z' })).toBe(false);
    expect(episodeMatches(base, { sync_state: 'synced' })).toBe(true);
    expect(episodeMatches(base, { sync_state: 'verified' })).toBe(false);
    expect(episodeMatches(base, { sync_state: 'unverified' })).toBe(true);
    expect(episodeMatches(base, { sync_state: 'synced', destination_id: 'dst_b' })).toBe(false);
    expect(episodeMatches(base, { sync_state: 'synced', to: 'dst_a' })).toBe(true);
  });

  test('sync events move a row: state, grant, object key, error', () => {
    const d = { episode_id: 'ep_1', robot_id: 'rbt_1', state: 'verified', destination_id: 'dst_a', grant_id: 'g2', object_key: 'k/ep_1/' };
    const v = applyReplicaEvent(base, 'episode.verified', d);
    expect(v.replicas).toMatchObject([{ destination_id: 'dst_a', state: 'verified', grant_id: 'g2', object_key: 'k/ep_1/', error: null }]);
    const f = applyReplicaEvent(base, 'episode.failed', { ...d, state: 'synced', error: { code: 'upload_failed', message: 'HTTP 500' } });
    expect(f.replicas).toMatchObject([{ state: 'synced', error: 'upload_failed: HTTP 500' }]);
    const added = applyReplicaEvent(base, 'episode.synced', { ...d, destination_id: 'dst_b', state: 'synced' });
    expect(added.replicas.map((r) => [r.destination_id, r.state])).toEqual([
      ['dst_a', 'synced'],
      ['dst_b', 'synced'],
    ]);
  });

  test('a 400 is placed at its field from the JSON Pointer of its issue', () => {
    const err = new FleetApiError({
      status: 400,
      code: 'validation_failed',
      message: 'invalid',
      requestId: 'req_test',
      details: { issues: [{ location: 'querystring', path: '/metadata.site~1x', code: 'invalid', message: 'too long' }, { location: 'body', path: '/filter', code: 'unrecognized_keys', message: 'unknown key', keys: ['taks_id'] }] },
    });
    expect(issueAt(err, 'metadata.site/x')).toBe('too long');
    expect(issueAt(err, 'filter')).toBe('unknown key: taks_id');
    expect(issueAt(err, 'filter', 'taks_id')).toBe('unknown key');
    expect(issueAt(err, 'filter', 'task_id')).toBeUndefined();
    expect(issueAt(err, 'from')).toBeUndefined();
  });
});
