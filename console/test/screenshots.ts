/**
 * `npm run console:screenshots -- <dir>`: signs in to a real cloud with simulated robots (the
 * browser tests' harness), opens each page of PAGES and writes `<dir>/<name>.png` at 1280×800,
 * plus `<dir>/<name>-phone.png` at 390×844 for the pages marked `phone`. Prints the paths it
 * wrote. Needs a build (`npm run build`): the cloud, agent and simulator CLIs and console/dist.
 */
import { resolve } from 'node:path';
import type { Page } from 'playwright-core';
import { DESKTOP, PHONE, screenshot } from '../../test/support/browser.js';
import { waitFor } from '../../test/support/wait.js';
import { signIn, startConsoleHarness } from './harness.js';

interface ShotIds {
  robot: string;
  episode: string;
  dataset: string;
}

interface ShotPage {
  name: string;
  /** The console path; `robot` is the first simulated robot's id, `episode` its first episode's, `dataset` a dataset made for the shots. */
  path(ids: ShotIds): string;
  /** Also shot at phone size. */
  phone?: boolean;
}

export const PAGES: readonly ShotPage[] = [
  { name: 'home', path: () => '/console/' },
  { name: 'fleet', path: () => '/console/fleet', phone: true },
  { name: 'robot', path: ({ robot }) => `/console/robots/${robot}`, phone: true },
  { name: 'episodes', path: () => '/console/episodes', phone: true },
  { name: 'episode', path: ({ episode }) => `/console/episodes/${episode}`, phone: true },
  // A new review queue over the episodes not yet reviewed.
  { name: 'review', path: () => '/console/review', phone: true },
  { name: 'datasets', path: () => '/console/datasets' },
  { name: 'dataset', path: ({ dataset }) => `/console/datasets/${dataset}` },
  { name: 'sync', path: () => '/console/sync' },
  { name: 'webhooks', path: () => '/console/webhooks' },
  { name: 'keys', path: () => '/console/keys' },
  { name: 'usage', path: () => '/console/usage' },
  { name: 'tokens', path: () => '/console/tokens' },
];

/** Waits for the page's main heading, then (briefly) for its loading notices to go. */
async function settle(page: Page): Promise<string> {
  const heading = page.getByRole('heading', { level: 1 }).first();
  await heading.waitFor({ state: 'visible', timeout: 30_000 });
  // A page that is still loading its first data shows a status line ending in "…".
  await waitFor(async () => ((await page.getByRole('status').filter({ hasText: /…$/ }).count()) === 0 ? true : undefined), { timeoutMs: 10_000 }).catch(() => undefined);
  return (await heading.textContent())?.trim() ?? '';
}

async function main(): Promise<void> {
  const arg = process.argv[2];
  if (!arg || arg.startsWith('-')) {
    process.stderr.write('usage: npm run console:screenshots -- <dir>\n');
    process.exit(2);
  }
  // npm runs scripts in the repository root; the directory is meant from where it was typed.
  const dir = resolve(process.env.INIT_CWD ?? process.cwd(), arg);
  await using h = await startConsoleHarness({ robots: 3, autoEpisodes: 30, subtaskMs: 300 });
  // A few finished episodes, so the lists are not empty (best effort: shots are taken anyway).
  await waitFor(
    async () => {
      const res = await h.cloud.fetch('/v1/episodes?limit=10');
      const body = (await res.json()) as { episodes?: unknown[] };
      return (body.episodes?.length ?? 0) >= 3 ? true : undefined;
    },
    { timeoutMs: 30_000 },
  ).catch(() => process.stderr.write('note: fewer than 3 episodes after 30 s; the episode list may look empty\n'));

  const listed = (await (await h.cloud.fetch('/v1/episodes?limit=1')).json()) as { episodes?: { id: string }[] };
  const made = (await (await h.cloud.fetch('/v1/datasets', { method: 'POST', json: { name: 'Successful episodes', filter: { outcome: 'success' } } })).json()) as { id?: string };
  const ids: ShotIds = { robot: h.robots[0] ?? 'rbt_none', episode: listed.episodes?.[0]?.id ?? 'ep_none', dataset: made.id ?? 'ds_none' };
  const { page, errors } = await h.browser.newPage({ viewport: DESKTOP });
  await signIn(page, h.baseUrl, h.adminKey);
  const written: string[] = [];
  const shoot = async (p: ShotPage, suffix: string) => {
    const seen = errors.length;
    await page.goto(`${h.baseUrl}${p.path(ids)}`);
    const title = await settle(page);
    if (title === 'Page not found') process.stderr.write(`note: ${p.path(ids)} shows "Page not found"\n`);
    written.push(await screenshot(page, dir, `${p.name}${suffix}`));
    for (const e of errors.slice(seen)) process.stderr.write(`page error on ${p.path(ids)}: ${e}\n`);
  };
  for (const p of PAGES) await shoot(p, '');
  await page.setViewportSize(PHONE);
  for (const p of PAGES.filter((x) => x.phone)) await shoot(p, '-phone');
  for (const path of written) process.stdout.write(`${path}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
