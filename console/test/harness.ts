/**
 * The console's browser tests and screenshots share this: a real `fleet-cloud serve` serving the
 * built console (`console/dist`), its first-start organization's admin key, a few simulated
 * robots connected through the real agent code, and a headless chromium. Dispose it
 * (`await using h = await startConsoleHarness()`): the browser, the robots and the cloud stop in
 * that order, and their temp dirs go.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { launchBrowser, type TestBrowser } from '../../test/support/browser.js';
import { holdExclusive } from '../../test/support/exclusive.js';
import { REPO_ROOT, startCloud, type CloudProcess } from '../../test/support/cloud.js';
import { startFleet, type FleetProcess } from '../../test/support/robots.js';
// Types only: the `inject('fleetPostgres')` typing test/support/cloud.ts relies on is declared
// there, and console/tsconfig.json does not otherwise include it.
import type {} from '../../test/support/global-setup.js';
import { startedParts } from '../../test/support/parts.js';

export const CONSOLE_DIST = join(REPO_ROOT, 'console', 'dist');

export interface ConsoleHarnessOptions {
  /** Simulated robots to enroll and start (default 3; 0 for none). */
  robots?: number;
  /** Episodes per minute each robot's operator starts on its own (default 0: none). */
  autoEpisodes?: number;
  /** Time an operator spends on each subtask while recording (the simulator's default is 2 s). */
  subtaskMs?: number;
  /** More `fleet-cloud serve` flags, e.g. `--egress-allow-loopback` for a grant provider or webhook receiver on 127.0.0.1. */
  cloudArgs?: readonly string[];
  /** More `fleet-sim fleet` flags, e.g. `--allow-http-uploads` for an S3 server on plain HTTP. */
  fleetArgs?: readonly string[];
}

export interface ConsoleHarness extends AsyncDisposable {
  readonly cloud: CloudProcess;
  /** The cloud's HTTP origin, e.g. `http://127.0.0.1:41234`; the console is at `${baseUrl}/console/`. */
  readonly baseUrl: string;
  /** An admin key of the cloud's first organization (enterprise tier: every page is open to it). */
  readonly adminKey: string;
  /** The simulated robots' ids, all connected when the harness resolves. */
  readonly robots: readonly string[];
  /** Null with `robots: 0`. */
  readonly fleet: FleetProcess | null;
  readonly browser: TestBrowser;
}

export async function startConsoleHarness(opts: ConsoleHarnessOptions = {}): Promise<ConsoleHarness> {
  if (!existsSync(join(CONSOLE_DIST, 'index.html'))) throw new Error(`${CONSOLE_DIST}/index.html is missing: run \`npm run build\` (or \`npm run build -w console\`) before the browser tests`);
  const count = opts.robots ?? 3;
  const parts = startedParts('the console harness');
  const dispose = () => parts.dispose();
  try {
    // One harness at a time across the run's workers (two chromiums with a cloud and a fleet each
    // starve a 2-core machine); the other worker meanwhile runs other files. Given back last.
    parts.own(await holdExclusive('console-browser'));
    const cloud = await startCloud({ args: ['--console-dir', CONSOLE_DIST, ...(opts.cloudArgs ?? [])], logLevel: 'warn' });
    parts.own(cloud);
    // The browser starts while the robots enroll and connect; both settle before a failure of
    // either is thrown, so the cleanup below finds everything that did start.
    const [fleetStart, browserStart] = await Promise.allSettled([
      count > 0
        ? startFleet(cloud, {
            count,
            logLevel: 'warn',
            ...(opts.autoEpisodes !== undefined ? { autoEpisodes: opts.autoEpisodes } : {}),
            ...(opts.subtaskMs !== undefined ? { subtaskMs: opts.subtaskMs } : {}),
            ...(opts.fleetArgs !== undefined ? { args: opts.fleetArgs } : {}),
          }).then((f) => parts.own(f))
        : Promise.resolve(null),
      launchBrowser().then((b) => parts.own(b)),
    ]);
    if (fleetStart.status === 'rejected') throw fleetStart.reason;
    if (browserStart.status === 'rejected') throw browserStart.reason;
    const fleet = fleetStart.value;
    const browser = browserStart.value;
    return {
      cloud,
      baseUrl: cloud.http,
      adminKey: cloud.adminKey,
      robots: fleet?.robots ?? [],
      fleet,
      browser,
      [Symbol.asyncDispose]: dispose,
    };
  } catch (err) {
    await dispose().catch(() => undefined);
    throw err;
  }
}

/**
 * Opens the console, pastes `key` into the field labelled "API key", presses "Sign in" and
 * waits until the signed-in shell shows its navigation.
 */
export async function signIn(page: Page, baseUrl: string, key: string): Promise<void> {
  await page.goto(`${baseUrl}/console/`);
  await page.getByLabel('API key', { exact: true }).fill(key);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByRole('navigation').first().waitFor({ state: 'visible' });
}
