/** What the player's browser tests read off the page. */
import type { Page } from 'playwright-core';

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
