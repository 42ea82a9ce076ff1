import type { Point, Rgb, SceneDescription } from './synthetic-motion.js';

/**
 * A small software renderer for the synthetic cameras: a tiled wall, a table, and the shapes
 * of a {@link SceneDescription} as flat-coloured discs, rectangles and thick segments, into an
 * `rgb8` buffer. No anti-aliasing: a frame is a few fills and distance tests per shape, about a
 * millisecond at 320×240, and its content moves as the scene does, which a video encoder can
 * compress (noise it could not).
 */

/** What a camera looks at: the point at the centre of the image and the width it spans (m). */
export interface CameraView {
  centre: Point;
  widthM: number;
}

/** The front camera: the whole workspace, from beside the arm. */
export const FRONT_VIEW: CameraView = { centre: { x: 0.32, y: 0.33 }, widthM: 1.25 };

/** The wrist camera: close to the gripper, a little above its fingertips, moving with it. */
export function wristView(scene: SceneDescription): CameraView {
  return { centre: { x: scene.gripper.x, y: scene.gripper.y + 0.05 }, widthM: 0.36 };
}

const TILE_M = 0.15;
const WALL: readonly [Rgb, Rgb] = [
  [196, 204, 214],
  [178, 188, 200],
];
const TABLE_NEAR: Rgb = [120, 86, 58];
const TABLE_FAR: Rgb = [168, 124, 84];
const EDGE: Rgb = [80, 56, 38];

export class SceneRenderer {
  /** One buffer per renderer, overwritten by each frame: take what you need before the next call. */
  readonly pixels: Buffer;
  private readonly colourRow: Buffer;
  private readonly tileColumn: Uint8Array;

  constructor(
    readonly width: number,
    readonly height: number,
  ) {
    this.pixels = Buffer.alloc(width * height * 3);
    this.colourRow = Buffer.alloc(width * 3);
    this.tileColumn = new Uint8Array(width);
  }

  /** Draws `scene` as `view` sees it into {@link pixels} and returns them. */
  render(scene: SceneDescription, view: CameraView): Buffer {
    const scale = this.width / view.widthM;
    const toPx = (p: Point): Point => ({ x: this.width / 2 + (p.x - view.centre.x) * scale, y: this.height / 2 - (p.y - view.centre.y) * scale });
    this.background(view, scale, toPx({ x: 0, y: 0 }).y);
    for (const s of scene.shapes) {
      if (s.kind === 'rect') {
        const a = toPx(s.min);
        const b = toPx(s.max);
        this.fillRect(Math.round(a.x), Math.round(b.y), Math.round(b.x), Math.round(a.y), s.colour);
      } else if (s.kind === 'disc') {
        const c = toPx(s.c);
        this.segment(c, c, Math.max(0.75, s.radius * scale), s.colour);
      } else {
        this.segment(toPx(s.a), toPx(s.b), Math.max(0.75, s.radius * scale), s.colour);
      }
    }
    return this.pixels;
  }

  /** Wall tiles above the table line `tableY` (px), the table below it, lighter towards the back. */
  private background(view: CameraView, scale: number, tableY: number): void {
    const { width, height, pixels, colourRow, tileColumn } = this;
    const left = view.centre.x - width / 2 / scale;
    for (let x = 0; x < width; x++) tileColumn[x] = Math.floor((left + (x + 0.5) / scale) / TILE_M) & 1;
    const rowBytes = width * 3;
    let lastParity = -1;
    for (let y = 0; y < height; y++) {
      const o = y * rowBytes;
      if (y < tableY - 1) {
        const wy = view.centre.y + (height / 2 - (y + 0.5)) / scale;
        const parity = Math.floor(wy / TILE_M) & 1;
        // Rows of one tile band are the same: build the row once per band, then copy it.
        if (parity !== lastParity) {
          for (let x = 0; x < width; x++) {
            const c = WALL[tileColumn[x]! ^ parity]!;
            colourRow[x * 3] = c[0];
            colourRow[x * 3 + 1] = c[1];
            colourRow[x * 3 + 2] = c[2];
          }
          lastParity = parity;
        }
        colourRow.copy(pixels, o);
      } else if (y <= tableY + 1) {
        fillPattern(pixels, o, o + rowBytes, EDGE);
        lastParity = -1;
      } else {
        const u = Math.min(1, (y - tableY) / Math.max(1, height - tableY));
        fillPattern(pixels, o, o + rowBytes, [lerp(TABLE_FAR[0], TABLE_NEAR[0], u), lerp(TABLE_FAR[1], TABLE_NEAR[1], u), lerp(TABLE_FAR[2], TABLE_NEAR[2], u)]);
      }
    }
  }

  private fillRect(x0: number, y0: number, x1: number, y1: number, colour: Rgb): void {
    const xa = Math.max(0, Math.min(x0, x1));
    const xb = Math.min(this.width, Math.max(x0, x1) + 1);
    const ya = Math.max(0, Math.min(y0, y1));
    const yb = Math.min(this.height, Math.max(y0, y1) + 1);
    if (xa >= xb) return;
    for (let y = ya; y < yb; y++) fillPattern(this.pixels, (y * this.width + xa) * 3, (y * this.width + xb) * 3, colour);
  }

  /** A segment `radius` px thick with round ends (a disc when a = b): every pixel within the distance. */
  private segment(a: Point, b: Point, radius: number, colour: Rgb): void {
    const { width, height, pixels } = this;
    const x0 = Math.max(0, Math.floor(Math.min(a.x, b.x) - radius));
    const x1 = Math.min(width - 1, Math.ceil(Math.max(a.x, b.x) + radius));
    const y0 = Math.max(0, Math.floor(Math.min(a.y, b.y) - radius));
    const y1 = Math.min(height - 1, Math.ceil(Math.max(a.y, b.y) + radius));
    const dx = b.x - a.x;
    const dy = b.y - a.y;
    const len2 = dx * dx + dy * dy;
    const r2 = radius * radius;
    const [cr, cg, cb] = colour;
    for (let y = y0; y <= y1; y++) {
      const py = y + 0.5 - a.y;
      for (let x = x0; x <= x1; x++) {
        const px = x + 0.5 - a.x;
        let t = len2 > 0 ? (px * dx + py * dy) / len2 : 0;
        t = t < 0 ? 0 : t > 1 ? 1 : t;
        const ex = px - t * dx;
        const ey = py - t * dy;
        if (ex * ex + ey * ey <= r2) {
          const o = (y * width + x) * 3;
          pixels[o] = cr;
          pixels[o + 1] = cg;
          pixels[o + 2] = cb;
        }
      }
    }
  }
}

const lerp = (a: number, b: number, u: number) => Math.round(a + (b - a) * u);

function fillPattern(buf: Buffer, start: number, end: number, [r, g, b]: Rgb): void {
  for (let o = start; o < end; o += 3) {
    buf[o] = r;
    buf[o + 1] = g;
    buf[o + 2] = b;
  }
}
