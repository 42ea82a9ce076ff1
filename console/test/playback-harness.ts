/**
 * The playback tests' world: the console playing recordings straight from the customer's bucket.
 * The processes are test/support/playback-stack.ts (the S3 server with a CORS rule for the
 * console's origin and a request log, `fleet-cloud serve --read-origin <bucket>` behind a logging
 * front, the reference grant provider as the destination of a routing rule, robots whose ROS 2
 * recordings are verified in the bucket, bags written by Python's rosbags on demand); this adds
 * Debian's chromium with a tab signed in with the first organization's admin key, served the
 * built console (`console/dist`) by the cloud, through the front.
 *
 * Everything the setup did is cleared from both request logs before the harness resolves, so a
 * test sees only its own requests. Dispose it (`await using h = await startPlaybackHarness()`):
 * the browser, then the processes newest first, stop and the temp dirs go.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { launchBrowser, type TestBrowser, type WatchedPage } from '../../test/support/browser.js';
import { holdExclusive } from '../../test/support/exclusive.js';
import { startPlaybackStack, type PlaybackStack, type PlaybackStackOptions } from '../../test/support/playback-stack.js';
import { CONSOLE_DIST, signIn } from './harness.js';
// Types only: the `inject('fleetPostgres')` typing test/support/cloud.ts relies on.
import type {} from '../../test/support/global-setup.js';
import { startedParts } from '../../test/support/parts.js';

export { DEFAULT_SIM_ARGS, type PlaybackEpisode } from '../../test/support/playback-stack.js';

export type PlaybackHarnessOptions = Omit<PlaybackStackOptions, 'consoleDir'>;

export interface PlaybackHarness extends PlaybackStack {
  readonly browser: TestBrowser;
  /** A tab signed in at the start (its errors collected: CSP violations and failed loads among them). */
  readonly page: Page;
  readonly errors: string[];
  /** Another tab, signed in (each tab keeps its key in its own sessionStorage). */
  signedInPage(opts?: { viewport?: { width: number; height: number } }): Promise<WatchedPage>;
}

export async function startPlaybackHarness(opts: PlaybackHarnessOptions = {}): Promise<PlaybackHarness> {
  if (!existsSync(join(CONSOLE_DIST, 'index.html'))) throw new Error(`${CONSOLE_DIST}/index.html is missing: run \`npm run build\` (or \`npm run build -w console\`) before the browser tests`);
  const parts = startedParts('the playback harness');
  const dispose = () => parts.dispose();
  try {
    // One chromium at a time across the run's workers, as console/test/harness.ts.
    parts.own(await holdExclusive('console-browser'));
    // Chromium starts while the robots record; both settle before a failure is thrown, so the
    // cleanup finds everything that did start.
    const [stackStart, browserStart] = await Promise.allSettled([
      startPlaybackStack({ ...opts, consoleDir: CONSOLE_DIST }).then((s) => parts.own(s)),
      launchBrowser().then((b) => parts.own(b)),
    ]);
    if (stackStart.status === 'rejected') throw stackStart.reason;
    if (browserStart.status === 'rejected') throw browserStart.reason;
    const stack = stackStart.value;
    const browser = browserStart.value;
    const signedInPage: PlaybackHarness['signedInPage'] = async (o) => {
      const tab = await browser.newPage(o);
      await signIn(tab.page, stack.baseUrl, stack.adminKey);
      return tab;
    };
    const first = await signedInPage();
    // Signing in asked the cloud for things: the test starts with empty logs.
    stack.clearCloudRequests();
    await stack.clearS3Requests();
    // The stack's getters (provider, episodes) stay live: it is the prototype, not a copy.
    const harness = Object.create(stack) as PlaybackHarness;
    return Object.assign(harness, { browser, page: first.page, errors: first.errors, signedInPage, [Symbol.asyncDispose]: dispose });
  } catch (err) {
    await dispose().catch(() => undefined);
    throw err;
  }
}
