import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { Page } from 'playwright-core';
import { FleetClient, type Episode } from '@fleet/client';
import type { EpisodeReport } from '@fleet/protocol';
import { checkA11y, DESKTOP, PHONE, screenshot, type WatchedPage } from '../../test/support/browser.js';
import { waitFor } from '../../test/support/wait.js';
import {
  collectEpisodes,
  decisionOf,
  decisionPatch,
  mergeQueue,
  newQueueId,
  nextUndecided,
  parseQueueQuery,
  parseTags,
  progressOf,
  pushUndo,
  MAX_UNDO,
  queueQuery,
  restorePatch,
  startIndex,
  type UndoStep,
} from '../src/review/queue.js';
import { signIn, startConsoleHarness, type ConsoleHarness } from './harness.js';
import { startPlaybackHarness, type PlaybackHarness } from './playback-harness.js';
import { enrollScriptedRobot, type ScriptedRobot } from './scripted-robot.js';

/**
 * The review queue: its rules on their own (which episodes a queue holds and in what order, what
 * a decision and its undo write), then the page in a real browser against a real cloud, whose
 * episodes a scripted robot reports. Every key's effect is checked through the API; a reload
 * resumes at the same episode with the same progress; failed decisions (409, 429, no network)
 * are said and not counted; a data:read key can watch but not decide. CONSOLE_SHOTS_DIR=<dir>
 * also writes screenshots.
 */

const SHOTS = process.env.CONSOLE_SHOTS_DIR;

function ep(id: string, reportedAt: number, annotations: Record<string, unknown> | null = null): Episode {
  return {
    id,
    robot_id: 'rbt_1',
    recording_session_id: 'rs_1',
    episode_seq: 1,
    session_name: null,
    task_id: null,
    task_name: null,
    subtask_id: null,
    operator_id: null,
    operator_name: null,
    outcome: 'success',
    recorded_outcome: 'success',
    control_mode: null,
    policy_version_id: null,
    eval_id: null,
    started_at: new Date(reportedAt).toISOString(),
    ended_at: null,
    duration_s: null,
    message_count: null,
    bag_size_bytes: null,
    bag_uri: null,
    metadata: null,
    annotations,
    reported_at: new Date(reportedAt).toISOString(),
    replicas: [],
  };
}

describe('queue rules', () => {
  const decided = (s: string) => ({ qa_status: s, qa_queue: 'rq_1' });

  test('the URL: filter, q, at and tags apart; tags trimmed, deduplicated and bounded; a bad q is a new queue', () => {
    const p = parseQueueQuery(new URLSearchParams('task_id=pick&has_annotation.qa_status=false&q=rq_abc&at=ep_2&tags=%20blurry,,occluded,blurry'));
    expect(p).toEqual({ filter: { task_id: 'pick', 'has_annotation.qa_status': 'false' }, q: 'rq_abc', at: 'ep_2', tags: ['blurry', 'occluded'], tagsNote: null });
    expect(queueQuery(p).toString()).toBe('task_id=pick&has_annotation.qa_status=false&q=rq_abc&at=ep_2&tags=blurry%2Coccluded');
    expect(parseQueueQuery(new URLSearchParams('q=a%20b')).q).toBeNull();
    expect(parseQueueQuery(new URLSearchParams(`q=${'x'.repeat(65)}`)).q).toBeNull();
    const many = parseTags(Array.from({ length: 12 }, (_x, i) => `t${i}`).join(','));
    expect(many.tags).toHaveLength(9);
    expect(many.note).toContain('3 left out');
    expect(parseTags(`ok,${'y'.repeat(65)}`)).toEqual({ tags: ['ok'], note: 'a tag has at most 64 characters: 1 left out' });
    const id = newQueueId();
    expect(id).toMatch(/^rq_[a-z2-7]{16}$/);
    expect(newQueueId()).not.toBe(id);
  });

  test('a queue merges the filter and its decided episodes by id, in the order indexed', () => {
    const filtered = [ep('e2', 2000), ep('e4', 4000), ep('e6', 6000)];
    const decidedHere = [ep('e1', 1000, decided('accepted')), ep('e4', 4000, decided('rejected')), ep('e5', 5000, decided('accepted')), ep('e7', 7000, decided('accepted'))];
    expect(mergeQueue(filtered, decidedHere).map((e) => e.id)).toEqual(['e1', 'e2', 'e4', 'e5', 'e6', 'e7']);
    expect(mergeQueue(filtered, []).map((e) => e.id)).toEqual(['e2', 'e4', 'e6']);
    expect(mergeQueue([], decidedHere).map((e) => e.id)).toEqual(['e1', 'e4', 'e5', 'e7']);
  });

  test('progress, the next undecided episode (wrapping) and where a queue opens count this queue only', () => {
    const list = [ep('e1', 1, decided('accepted')), ep('e2', 2), ep('e3', 3, { qa_status: 'rejected', qa_queue: 'rq_other' }), ep('e4', 4, decided('rejected'))];
    expect(progressOf(list, 'rq_1')).toEqual({ reviewed: 2, total: 4 });
    expect(decisionOf(list[2]!, 'rq_1')).toBeNull();
    expect(decisionOf(list[2]!, 'rq_other')).toBe('rejected');
    expect(decisionOf(ep('x', 1, { qa_status: 'maybe', qa_queue: 'rq_1' }), 'rq_1')).toBeNull();
    expect(nextUndecided(list, 'rq_1', 0)).toBe(1);
    expect(nextUndecided(list, 'rq_1', 1)).toBe(2);
    expect(nextUndecided(list, 'rq_1', 2)).toBe(1);
    expect(nextUndecided([list[0]!, list[3]!], 'rq_1', 0)).toBe(-1);
    expect(startIndex(list, 'rq_1', 'e4')).toBe(3);
    expect(startIndex(list, 'rq_1', 'gone')).toBe(1);
    expect(startIndex(list, 'rq_1', null)).toBe(1);
    expect(startIndex([list[0]!], 'rq_1', null)).toBe(0);
    expect(startIndex([], 'rq_1', null)).toBe(-1);
  });

  test('a decision writes status, reviewer, time and queue (tags only when toggled); its undo restores or deletes each key', () => {
    const at = new Date('2026-11-23T12:00:00.000Z');
    const reviewer = { keyId: 'key_1', keyName: 'Ann' };
    const plain = decisionPatch({ status: 'accepted', reviewer, q: 'rq_1', at });
    expect(plain).toEqual({ qa_status: 'accepted', qa_by: { id: 'key_1', name: 'Ann' }, qa_at: '2026-11-23T12:00:00.000Z', qa_queue: 'rq_1' });
    expect(decisionPatch({ status: 'rejected', reviewer, q: 'rq_1', at, tags: [] })).toMatchObject({ qa_status: 'rejected', qa_tags: [] });
    const before = ep('e1', 1, { qa_status: 'rejected', qa_tags: ['blurry'], note: 'keep' });
    expect(restorePatch(before, Object.keys(plain))).toEqual({ qa_status: 'rejected', qa_by: null, qa_at: null, qa_queue: null });
    expect(restorePatch(ep('e2', 1), ['qa_status', 'qa_tags'])).toEqual({ qa_status: null, qa_tags: null });
  });

  test('the undo stack keeps the latest steps only', () => {
    let s: UndoStep[] = [];
    for (let i = 0; i < MAX_UNDO + 5; i++) s = pushUndo(s, { kind: 'outcome', episodeId: `e${i}`, from: 'success', to: 'failure' });
    expect(s).toHaveLength(MAX_UNDO);
    expect(s[0]!.episodeId).toBe('e5');
  });

  test('collecting a listing follows the cursor and stops at the cap, saying so', async () => {
    const pages = new Map<string | undefined, { episodes: Episode[]; cursor: string | null }>([
      [undefined, { episodes: [ep('a', 1), ep('b', 2)], cursor: 'c1' }],
      ['c1', { episodes: [ep('c', 3), ep('d', 4)], cursor: 'c2' }],
      ['c2', { episodes: [ep('e', 5)], cursor: null }],
    ]);
    const calls: (string | undefined)[] = [];
    const page = async (c: string | undefined) => (calls.push(c), pages.get(c)!);
    expect(await collectEpisodes(page, 10)).toMatchObject({ capped: false });
    expect((await collectEpisodes(page, 10)).episodes.map((e) => e.id)).toEqual(['a', 'b', 'c', 'd', 'e']);
    calls.length = 0;
    const capped = await collectEpisodes(page, 3);
    expect(capped.capped).toBe(true);
    expect(capped.episodes.map((e) => e.id)).toEqual(['a', 'b', 'c']);
    expect(calls).toEqual([undefined, 'c1']);
    // Exactly the cap, with more pages behind it: capped, without asking for them.
    calls.length = 0;
    expect((await collectEpisodes(page, 4)).capped).toBe(true);
    expect(calls).toEqual([undefined, 'c1']);
    expect((await collectEpisodes(page, 5)).capped).toBe(false);
  });
});

let h: ConsoleHarness;
let api: FleetClient;
let curator: { key: string; id: string; name: string };
let readKey: string;
let robot: ScriptedRobot;
const RUN = Date.now().toString(36);
const TASK = `review-${RUN}`;
/** The queue's episodes, in the order reported (and so indexed). */
const ids: string[] = [];
let reportSeq = 0;

async function report(over: Partial<EpisodeReport> = {}): Promise<string> {
  reportSeq += 1;
  const id = `ep_review${RUN}x${reportSeq}`;
  const started = Date.now() - 3_600_000 + reportSeq * 1000;
  const files = [{ path: 'recording.mcap', size_bytes: 4096, sha256: 'a'.repeat(64) }];
  const body: EpisodeReport = {
    id,
    recording_session_id: 'rs_review',
    episode_seq: reportSeq,
    session_name: 'Review bench',
    task_id: TASK,
    task_name: 'Pick the part',
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
    bag_size_bytes: 4096,
    metadata: {},
    segments: [],
    manifest: { files, total_bytes: 4096 },
    ...over,
  };
  const msgId = `m-${id}`;
  const ack = await robot.outbox('episode.report', msgId, body);
  expect(ack, msgId).toMatchObject({ ok: true });
  return id;
}

/** Pages of the running test, closed after it. */
const pages: Page[] = [];

async function open(path: string, key: string, viewport: { width: number; height: number } = DESKTOP): Promise<WatchedPage> {
  const w = await h.browser.newPage({ viewport });
  pages.push(w.page);
  await signIn(w.page, h.baseUrl, key);
  await w.page.goto(`${h.baseUrl}/console${path}`);
  await w.page.getByRole('heading', { level: 1 }).first().waitFor();
  return w;
}

async function shot(page: Page, name: string, fullPage = true): Promise<void> {
  if (!SHOTS) return;
  // A full-page shot of a scrolled page draws the sticky top bar where it is, not at the top.
  await page.evaluate(() => window.scrollTo(0, 0));
  await screenshot(page, SHOTS, name, { fullPage });
}

const NOT_REVIEWED = `task_id=${TASK}&has_annotation.qa_status=false`;

function urlOf(page: Page): URLSearchParams {
  return new URL(page.url()).searchParams;
}

/** The episode the page shows, from its URL (the page writes it there as it moves). */
const atOf = (page: Page) => urlOf(page).get('at');
/**
 * Waits until the queue is loaded and shows an episode (the URL names it); a page that does not
 * get there fails with what it shows instead and its errors.
 */
async function queueOpened(w: WatchedPage): Promise<void> {
  try {
    await waitFor(() => (atOf(w.page) ? true : undefined), { timeoutMs: 30_000, description: 'the queue showing an episode' });
  } catch (err) {
    const shown = await w.page.locator('main').innerText().catch(() => '(no main)');
    throw new Error(`${err instanceof Error ? err.message : String(err)} at ${w.page.url()}; the page shows: ${shown.slice(0, 1500)}; errors: ${w.errors.join(' | ') || 'none'}`, { cause: err });
  }
}

const progressText = (page: Page) => page.locator('#review-progress-text').textContent();

/** The page is done loading, and neither axe nor the browser found anything wrong. */
async function clean(w: WatchedPage, expected: readonly RegExp[] = []): Promise<void> {
  await expect.poll(() => w.page.getByRole('status').filter({ hasText: /…$/ }).count()).toBe(0);
  expect(await checkA11y(w.page)).toEqual([]);
  expect(w.errors.filter((e) => !expected.some((re) => re.test(e)))).toEqual([]);
}

describe('review queue page', () => {
  beforeAll(async () => {
    h = await startConsoleHarness({ robots: 0 });
    api = new FleetClient({ baseUrl: h.baseUrl, apiKey: h.adminKey });
    robot = await enrollScriptedRobot(api, h.cloud.mqtt, { name: 'review-arm' });
    for (let i = 0; i < 5; i++) ids.push(await report());
    // One already reviewed in an earlier queue: "not yet reviewed" leaves it out.
    const earlier = await report();
    await api.episodes.annotate(earlier, { annotations: { qa_status: 'accepted', qa_queue: 'rq_earlier' } });
    const made = await api.apiKeys.create({ name: 'curator ann', scopes: ['data:read', 'data:write'] });
    curator = { key: made.key, id: made.id, name: 'curator ann' };
    readKey = (await api.apiKeys.create({ name: 'review watcher', scopes: ['data:read'] })).key;
  }, 240_000);

  afterAll(async () => {
    await robot?.close();
    await h?.[Symbol.asyncDispose]();
  });

  afterEach(async () => {
    await Promise.all(pages.splice(0).map((p) => p.close().catch(() => undefined)));
  });

  test('accept, reject with a tag, override, undo twice, reload mid-queue; the API holds what the keys wrote', async () => {
    const w = await open(`/review?${NOT_REVIEWED}&tags=blurry,occluded`, curator.key);
    const { page } = w;
    // A new queue: a random q in the URL, the first episode named by at.
    await expect.poll(() => urlOf(page).get('q')).toMatch(/^rq_[a-z2-7]{16}$/);
    const q = urlOf(page).get('q')!;
    await queueOpened(w);
    expect(atOf(page)).toBe(ids[0]);
    await expect.poll(() => progressText(page)).toBe('0 of 5 episodes reviewed');
    expect(Object.fromEntries(urlOf(page))).toEqual({ task_id: TASK, 'has_annotation.qa_status': 'false', q, at: ids[0], tags: 'blurry,occluded' });
    await clean(w);
    await shot(page, 'review');

    // a: accepted, by this key, at a time, in this queue; no tags were toggled, so no qa_tags.
    const t0 = Date.now();
    await page.keyboard.press('a');
    await expect.poll(() => atOf(page)).toBe(ids[1]);
    await expect.poll(() => progressText(page)).toBe('1 of 5 episodes reviewed');
    const first = (await api.episodes.get(ids[0]!)).annotations!;
    expect(Object.keys(first).sort()).toEqual(['qa_at', 'qa_by', 'qa_queue', 'qa_status']);
    expect(first).toMatchObject({ qa_status: 'accepted', qa_by: { id: curator.id, name: curator.name }, qa_queue: q });
    expect(Date.parse(first.qa_at as string)).toBeGreaterThanOrEqual(t0 - 60_000);

    // 2 toggles "occluded" (its button says so), then r rejects with it.
    await page.keyboard.press('2');
    await expect.poll(() => page.getByRole('button', { name: 'occluded' }).getAttribute('aria-pressed')).toBe('true');
    expect(await page.getByRole('button', { name: 'blurry' }).getAttribute('aria-pressed')).toBe('false');
    await page.keyboard.press('r');
    await expect.poll(() => atOf(page)).toBe(ids[2]);
    await expect.poll(() => progressText(page)).toBe('2 of 5 episodes reviewed');
    expect((await api.episodes.get(ids[1]!)).annotations).toMatchObject({ qa_status: 'rejected', qa_tags: ['occluded'], qa_queue: q });

    // o: the form opens on its first field; typing the reason (letters that are keys) decides nothing.
    const untouched = (await api.episodes.get(ids[2]!)).annotations;
    await page.keyboard.press('o');
    const form = page.getByRole('form', { name: 'Override the outcome' });
    await form.waitFor();
    await expect.poll(() => page.evaluate(() => document.activeElement?.id)).toBe('review-outcome');
    await form.getByLabel('New outcome').selectOption('failure');
    await form.getByLabel('Reason').click();
    await page.keyboard.type('gripper dropped it: a rerun, press n or p');
    expect(atOf(page)).toBe(ids[2]);
    await page.keyboard.press('Enter');
    await expect.poll(async () => (await api.episodes.get(ids[2]!)).outcome).toBe('failure');
    await form.waitFor({ state: 'detached' });
    expect(atOf(page)).toBe(ids[2]);
    expect(await progressText(page)).toBe('2 of 5 episodes reviewed');
    expect((await api.episodes.outcomeHistory(ids[2]!)).outcome_history.map((c) => [c.from, c.to, c.reason])).toEqual([['success', 'failure', 'gripper dropped it: a rerun, press n or p']]);
    // Typing in the header's tag field decides nothing either.
    await page.getByLabel('Tags (keys 1–9)').click();
    await page.keyboard.type(', a, r');
    expect((await api.episodes.get(ids[2]!)).annotations).toEqual(untouched);
    await page.getByLabel('Tags (keys 1–9)').fill('blurry, occluded');
    await page.locator('main').focus();

    // u takes back the override (the outcome history says "undo"), u again the rejection of ids[1].
    await page.keyboard.press('u');
    await expect.poll(async () => (await api.episodes.get(ids[2]!)).outcome).toBe('success');
    expect((await api.episodes.outcomeHistory(ids[2]!)).outcome_history.map((c) => [c.from, c.to, c.reason])).toEqual([
      ['success', 'failure', 'gripper dropped it: a rerun, press n or p'],
      ['failure', 'success', 'undo'],
    ]);
    await page.keyboard.press('u');
    await expect.poll(() => atOf(page)).toBe(ids[1]);
    await expect.poll(() => progressText(page)).toBe('1 of 5 episodes reviewed');
    // The keys it wrote are gone again (they were absent before).
    expect((await api.episodes.get(ids[1]!)).annotations).toEqual({});
    expect((await api.episodes.get(ids[0]!)).annotations).toMatchObject({ qa_status: 'accepted' });

    // Rejected again, without tags this time: moves on to ids[2].
    await page.keyboard.press('r');
    await expect.poll(() => atOf(page)).toBe(ids[2]);
    const again = (await api.episodes.get(ids[1]!)).annotations!;
    expect(Object.keys(again).sort()).toEqual(['qa_at', 'qa_by', 'qa_queue', 'qa_status']);
    expect(again).toMatchObject({ qa_status: 'rejected', qa_by: { id: curator.id, name: curator.name }, qa_queue: q });
    await shot(page, 'review-decided');
    await clean(w);

    // Reload: the filter ("not yet reviewed") no longer matches ids[0] and ids[1], the queue still
    // counts them; the same episode, the same progress.
    await page.reload();
    await page.getByRole('heading', { level: 1 }).first().waitFor();
    await expect.poll(() => progressText(page)).toBe('2 of 5 episodes reviewed');
    expect(atOf(page)).toBe(ids[2]);
    expect(urlOf(page).get('q')).toBe(q);
    await expect.poll(() => page.getByRole('heading', { name: 'Episode 3 of 5' }).count()).toBe(1);
    // p / n move through the queue, decided episodes included.
    await page.keyboard.press('p');
    await expect.poll(() => atOf(page)).toBe(ids[1]);
    expect(await page.locator('.review-facts .pill').first().textContent()).toBe('rejected');
    await page.keyboard.press('n');
    await expect.poll(() => atOf(page)).toBe(ids[2]);
    // Buttons do what the keys do: Accept by mouse, then the next undecided (ids[3]).
    await page.getByRole('button', { name: 'Accept', exact: true }).click();
    await expect.poll(() => atOf(page)).toBe(ids[3]);
    await expect.poll(() => progressText(page)).toBe('3 of 5 episodes reviewed');
    // The key help opens with ? and lists the keys.
    await page.keyboard.press('?');
    await expect.poll(() => page.locator('details.review-keys').getAttribute('open')).toBe('');
    expect(await page.locator('details.review-keys').textContent()).toContain('undo the last decision');
    await clean(w);
    await page.setViewportSize(PHONE);
    await shot(page, 'review-phone');
    expect(await checkA11y(page)).toEqual([]);
  });

  test('a failed decision (409, 429, no network) is said on the page, not counted, and nothing is lost', async () => {
    const w = await open(`/review?${NOT_REVIEWED}&tags=blurry`, curator.key);
    const { page } = w;
    await queueOpened(w);
    const at = atOf(page)!;
    const before = (await api.episodes.get(at)).annotations;
    await expect.poll(() => progressText(page)).toBe('0 of 2 episodes reviewed');
    await page.keyboard.press('1');
    await expect.poll(() => page.getByRole('button', { name: 'blurry' }).getAttribute('aria-pressed')).toBe('true');

    const answers: { status: number; headers: Record<string, string>; body: { error: { code: string; message: string; request_id: string } } }[] = [
      { status: 409, headers: {}, body: { error: { code: 'conflict', message: 'the episode changed meanwhile', request_id: 'req_conflict' } } },
      // A Retry-After past the client's longest wait: thrown at once, not waited for.
      { status: 429, headers: { 'retry-after': '3600' }, body: { error: { code: 'rate_limited', message: 'too many requests', request_id: 'req_limit' } } },
    ];
    for (const a of answers) {
      await page.route('**/v1/episodes/*', (route) =>
        route.request().method() === 'PATCH' ? route.fulfill({ status: a.status, headers: { 'content-type': 'application/json', ...a.headers }, body: JSON.stringify(a.body) }) : route.fallback(),
      );
      await page.keyboard.press('a');
      const alert = page.getByRole('alert').filter({ hasText: a.body.error.code });
      await alert.waitFor();
      expect(await alert.textContent()).toContain(a.body.error.request_id);
      expect(atOf(page)).toBe(at);
      expect(await progressText(page)).toBe('0 of 2 episodes reviewed');
      expect(await page.getByRole('button', { name: 'blurry' }).getAttribute('aria-pressed')).toBe('true');
      await page.unroute('**/v1/episodes/*');
    }
    await page.route('**/v1/episodes/*', (route) => (route.request().method() === 'PATCH' ? route.abort('connectionreset') : route.fallback()));
    await page.keyboard.press('r');
    await page.getByRole('alert').filter({ hasText: 'could not be reached' }).waitFor();
    expect(atOf(page)).toBe(at);
    expect(await progressText(page)).toBe('0 of 2 episodes reviewed');
    await shot(page, 'review-error', false);
    await page.unroute('**/v1/episodes/*');
    expect((await api.episodes.get(at)).annotations).toEqual(before);

    // The same key again, the network back: written with the tag kept from before.
    await page.keyboard.press('r');
    await expect.poll(() => progressText(page)).toBe('1 of 2 episodes reviewed');
    expect((await api.episodes.get(at)).annotations).toMatchObject({ qa_status: 'rejected', qa_tags: ['blurry'] });
    await expect.poll(() => page.getByRole('alert').count()).toBe(0);
    await clean(w, [/status of (409|429)/, /ERR_CONNECTION_RESET|net::ERR/]);
  });

  test('a data:read key watches a queue: decisions are disabled and say which scope they need; keys change nothing', async () => {
    const w = await open(`/review?task_id=${TASK}`, readKey);
    const { page } = w;
    await queueOpened(w);
    const at = atOf(page)!;
    const before = await api.episodes.get(at);
    const accept = page.getByRole('button', { name: /^Accept/ });
    expect(await accept.isDisabled()).toBe(true);
    expect(await accept.textContent()).toContain('needs the scope data:write');
    for (const name of [/^Reject/, /^Override outcome/, /^Undo/]) expect(await page.getByRole('button', { name }).isDisabled()).toBe(true);
    expect(await page.getByText('This key can watch the queue only: deciding needs the scope data:write.').count()).toBe(1);
    await page.keyboard.press('a');
    await expect.poll(() => page.getByRole('status').filter({ hasText: 'needs the scope data:write' }).count()).toBeGreaterThan(0);
    await page.keyboard.press('o');
    expect(await page.getByRole('form', { name: 'Override the outcome' }).count()).toBe(0);
    expect(await api.episodes.get(at)).toEqual(before);
    // Watching works: n moves on.
    await page.keyboard.press('n');
    await expect.poll(() => atOf(page)).not.toBe(at);
    await shot(page, 'review-read-only', false);
    await clean(w);
  });

  test('a filter the API refuses is said with the parameter it names; nothing is shown to decide', async () => {
    const w = await open(`/review?task_id=${TASK}&from=yesterday&q=rq_badfilter`, curator.key);
    const { page } = w;
    await page.getByRole('alert').filter({ hasText: 'validation_failed' }).waitFor();
    expect(await page.locator('.review-filter-issues').textContent()).toContain('from');
    expect(await page.getByRole('button', { name: 'Accept', exact: true }).count()).toBe(0);
    await clean(w, [/status of 400/]);
  });

  test('"Review these" on the episode list opens a new queue over the list\'s filter', async () => {
    const w = await open(`/episodes?task_id=${TASK}&outcome=success`, curator.key);
    const { page } = w;
    await page.getByRole('link', { name: 'Review these' }).click();
    await page.getByRole('heading', { name: 'Review queue' }).waitFor();
    const url = new URL(page.url());
    expect(url.pathname).toBe('/console/review');
    expect(urlOf(page).get('task_id')).toBe(TASK);
    expect(urlOf(page).get('outcome')).toBe('success');
    expect(urlOf(page).get('q')).toMatch(/^rq_/);
    // Every episode of the task (the one reviewed in another queue too), none of them decided in this new queue.
    await expect.poll(() => progressText(page)).toBe('0 of 6 episodes reviewed');
    // The nav entry starts a queue over the episodes not yet reviewed.
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Review' }).click();
    await expect.poll(() => urlOf(page).get('has_annotation.qa_status')).toBe('false');
    await clean(w);
  });
});

describe('review queue with playback', () => {
  let p: PlaybackHarness;
  beforeAll(async () => {
    // Two simulated ROS 2 episodes, verified in the bucket: the player reads them from there.
    p = await startPlaybackHarness({ robots: 1, episodesPerRobot: 2, episodeMs: 6000 });
  }, 600_000);
  afterAll(async () => {
    await p?.[Symbol.asyncDispose]();
  });

  test("each episode plays as the queue reaches it; the player's keys work and decide nothing", async () => {
    const w = await p.signedInPage();
    pages.push(w.page);
    const { page } = w;
    const [first, second] = p.episodes.map((e) => e.id);
    await page.goto(`${p.baseUrl}/console/review?robot_id=${p.robots[0]!}&has_annotation.qa_status=false`);
    await queueOpened(w);
    await expect.poll(() => atOf(page)).toBe(first);
    const stage = page.locator('.review-player .player-stage');
    // Autoplay: it plays (or, the recording being short, has played to its end).
    await expect.poll(() => stage.getAttribute('data-status'), { timeout: 60_000 }).toMatch(/playing|buffering|ended/);
    await page.locator('main').focus();
    // Space and the arrows are the player's; the queue stays where it is and writes nothing.
    const before = await p.cloud.client().episodes.get(first!);
    const status = await stage.getAttribute('data-status');
    await page.keyboard.press('Space');
    await expect.poll(() => stage.getAttribute('data-status'), { timeout: 30_000 }).not.toBe(status);
    await page.keyboard.press('Home');
    await page.keyboard.press('ArrowRight');
    const startNs = await stage.getAttribute('data-start-ns');
    await expect.poll(() => stage.getAttribute('data-playhead-ns'), { timeout: 30_000 }).not.toBe(startNs);
    expect(atOf(page)).toBe(first);
    // Decided nothing: the layers a decision writes are as they were (the replicas may move on their own).
    const after = await p.cloud.client().episodes.get(first!);
    expect(after.annotations).toEqual(before.annotations);
    expect(after.outcome).toBe(before.outcome);
    await shot(page, 'review-playing');

    // a: accepted, and the next episode plays.
    await page.keyboard.press('a');
    await expect.poll(() => atOf(page), { timeout: 30_000 }).toBe(second);
    expect((await p.cloud.client().episodes.get(first!)).annotations).toMatchObject({ qa_status: 'accepted' });
    await expect.poll(() => page.locator('.review-player .player-stage').getAttribute('data-status'), { timeout: 60_000 }).toMatch(/playing|buffering|ended/);
    await clean(w);
  });
});
