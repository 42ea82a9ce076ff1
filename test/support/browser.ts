/**
 * A real browser for the console's tests: Debian's `chromium` package driven by playwright-core
 * (the library without its browser downloads; `npx playwright install` is never run). Running as
 * root it installs the package when missing, like the PostgreSQL and mosquitto support files.
 * Each browser gets a fresh profile in a temp dir, removed on dispose.
 */
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { CHROMIUM_PACKAGE, ensureDebianPackages } from './debian.js';

export const CHROMIUM = '/usr/bin/chromium';

const isRoot = process.getuid?.() === 0;

/** The browser binary, installed from Debian (apt-get) when running as root and it is missing; throws otherwise. */
export function ensureChromium(log: (line: string) => void = (l) => console.warn(l)): string {
  const found = CHROMIUM_PACKAGE.find();
  if (found) return found;
  if (!isRoot) throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install -y chromium as root), or run the tests as root`);
  ensureDebianPackages([CHROMIUM_PACKAGE], log);
  const installed = CHROMIUM_PACKAGE.find();
  if (!installed) throw new Error('chromium: apt-get could not install it; install the chromium package by hand');
  return installed;
}

/** The flags every test browser gets; the profile directory is the launch's own. */
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export const DESKTOP = { width: 1280, height: 800 } as const;
export const PHONE = { width: 390, height: 844 } as const;

/** A page with what went wrong on it: console errors and uncaught exceptions, as readable lines. */
export interface WatchedPage {
  readonly page: Page;
  /** `console.error` messages (CSP violations and failed loads among them) and uncaught page errors, in order. */
  readonly errors: string[];
}

export interface TestBrowser extends AsyncDisposable {
  /** The one browser context (a persistent profile in a fresh temp dir). */
  readonly context: BrowserContext;
  /** A new tab (its own sessionStorage), 1280×800 unless told, whose errors are collected. */
  newPage(opts?: { viewport?: { width: number; height: number } }): Promise<WatchedPage>;
  close(): Promise<void>;
}

/**
 * Starts headless chromium with a fresh profile. Playwright refuses `--user-data-dir` among the
 * arguments of `launch()` (it makes its own profile there), so the profile is a persistent
 * context on a temp dir of ours, which dispose removes.
 */
export async function launchBrowser(opts: { log?: (line: string) => void } = {}): Promise<TestBrowser> {
  const executablePath = ensureChromium(opts.log);
  const profile = await mkdtemp(join(tmpdir(), 'fleet-chromium-'));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, { executablePath, headless: true, args: CHROMIUM_ARGS, viewport: DESKTOP });
  } catch (err) {
    await rm(profile, { recursive: true, force: true });
    throw err;
  }
  // The persistent context opens with one blank tab; tests open their own.
  await Promise.all(context.pages().map((p) => p.close()));
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    try {
      await context.close();
    } finally {
      // Chromium may still be writing its profile for a moment after the close.
      await rm(profile, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    }
  };
  return {
    context,
    async newPage(o = {}) {
      const page = await context.newPage();
      if (o.viewport) await page.setViewportSize(o.viewport);
      return { page, errors: watchErrors(page) };
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** Collects the page's console errors and uncaught exceptions from now on. */
export function watchErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const { url, lineNumber } = msg.location();
    errors.push(`console.error: ${msg.text()}${url ? ` (${url}${lineNumber ? `:${lineNumber}` : ''})` : ''}`);
  });
  page.on('pageerror', (err) => errors.push(`uncaught: ${err.stack ?? err.message}`));
  return errors;
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  helpUrl: string;
  nodes: { target: unknown[]; failureSummary?: string }[];
}

/**
 * Runs axe-core on the page as it is now and returns its serious and critical violations, one
 * readable line each (rule, impact, what it asks, the elements), so `expect(...).toEqual([])`
 * shows what to fix. The script goes in through the DevTools protocol (`page.evaluate`), which
 * the page's CSP does not govern; a `<script>` tag would be refused by `script-src 'self'`.
 */
export async function checkA11y(page: Page, opts: { include?: readonly ('minor' | 'moderate' | 'serious' | 'critical')[] } = {}): Promise<string[]> {
  const impacts = opts.include ?? ['serious', 'critical'];
  // The callbacks run in the page; this file is compiled without the DOM library, hence globalThis.
  if (!(await page.evaluate(() => 'axe' in globalThis))) await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    const axe = (globalThis as unknown as { axe: { run(o: unknown): Promise<{ violations: AxeViolation[] }> } }).axe;
    const r = await axe.run({ resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl, nodes: v.nodes.map((n) => ({ target: n.target, failureSummary: n.failureSummary })) }));
  });
  return violations
    .filter((v) => v.impact !== null && (impacts as readonly string[]).includes(v.impact))
    .map((v) => {
      const nodes = v.nodes.map((n) => `${n.target.map(String).join(' ')}${n.failureSummary ? ` — ${n.failureSummary.replace(/\s+/g, ' ').trim()}` : ''}`);
      return `${v.id} (${v.impact}): ${v.help} [${v.helpUrl}]\n  ${nodes.join('\n  ')}`;
    });
}

/** Writes `<dir>/<name>.png` of the viewport (the whole page with `fullPage`) and returns its path. */
export async function screenshot(page: Page, dir: string, name: string, opts: { fullPage?: boolean } = {}): Promise<string> {
  await mkdir(dir, { recursive: true });
  const path = join(dir, `${name}.png`);
  await page.screenshot({ path, fullPage: opts.fullPage ?? false, animations: 'disabled' });
  return path;
}
