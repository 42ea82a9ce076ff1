/** What the player's browser tests read off the page, and of the source recording. */
import type { Page } from 'playwright-core';
import { expect } from 'vitest';
import type { DecodedMessage, McapRecording } from '@fleet/recordings';

/** The attribute `name` of the first element matching `selector`. */
export async function attr(page: Page, selector: string, name: string): Promise<string | null> {
  return page.locator(selector).first().getAttribute(name);
}

/** The latest message of `topic` with log time <= t, from the source recording. */
export async function latestAtOrBefore(r: McapRecording, topic: string, t: bigint): Promise<DecodedMessage | undefined> {
  const it = r.messages([topic], { endNs: t, reverse: true });
  try {
    const m = await it.next();
    return m.done === true ? undefined : m.value;
  } finally {
    await it.return();
  }
}

/**
 * Seeks with the seek bar to 70 % of the recording and 17 ms (off any frame's time), waits until
 * the stage's playhead is there, and returns it (ns).
 */
export async function seekIntoRecording(page: Page): Promise<bigint> {
  const startNs = BigInt((await attr(page, '.player-stage', 'data-start-ns'))!);
  const endNs = BigInt((await attr(page, '.player-stage', 'data-end-ns'))!);
  const seekMs = Math.round(Number((endNs - startNs) / 1_000_000n) * 0.7) + 17;
  await page.getByRole('slider', { name: 'Seek' }).fill(String(seekMs));
  const playhead = startNs + BigInt(seekMs) * 1_000_000n;
  await expect.poll(() => attr(page, '.player-stage', 'data-playhead-ns')).toBe(playhead.toString());
  return playhead;
}

/** The pixels of the camera canvas of `topic`, as packed RGB. */
export async function canvasRgb(page: Page, topic: string): Promise<{ width: number; height: number; rgb: Buffer }> {
  const r = await page.evaluate((t) => {
    const c = document.querySelector<HTMLCanvasElement>(`canvas[data-topic="${t}"]`)!;
    const d = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
    let s = '';
    for (let i = 0; i < d.length; i += 4) s += String.fromCharCode(d[i]!, d[i + 1]!, d[i + 2]!);
    return { width: c.width, height: c.height, b64: btoa(s) };
  }, topic);
  return { width: r.width, height: r.height, rgb: Buffer.from(r.b64, 'base64') };
}
