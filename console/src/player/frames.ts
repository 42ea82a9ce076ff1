import type { CameraImage } from '@fleet/recordings';

/**
 * A camera image onto a canvas at its own size (CSS scales the canvas to the tile): raw RGB as
 * ImageData (exact pixels), JPEG and PNG through the browser's own decoder
 * (`createImageBitmap`). The canvas gets `data-frame-log-time` (ns) once the frame is on it.
 */

/** Packed RGB to the RGBA ImageData wants. */
export function rgbToImageData(width: number, height: number, rgb: Uint8Array): ImageData {
  const out = new ImageData(width, height);
  const px = out.data;
  for (let i = 0, o = 0; i < width * height * 3; i += 3, o += 4) {
    px[o] = rgb[i]!;
    px[o + 1] = rgb[i + 1]!;
    px[o + 2] = rgb[i + 2]!;
    px[o + 3] = 255;
  }
  return out;
}

/**
 * Draws `image`; resolves false when a newer draw on the same canvas started meanwhile (the
 * older bitmap is dropped, never drawn over the newer one).
 */
export async function drawFrame(canvas: HTMLCanvasElement, image: CameraImage, logTimeNs: bigint, isCurrent: () => boolean): Promise<boolean> {
  if (image.kind === 'raw') {
    if (canvas.width !== image.width) canvas.width = image.width;
    if (canvas.height !== image.height) canvas.height = image.height;
    const ctx = canvas.getContext('2d');
    if (!ctx) return false;
    ctx.putImageData(rgbToImageData(image.width, image.height, image.rgb), 0, 0);
  } else {
    const type = image.format === 'jpeg' ? 'image/jpeg' : 'image/png';
    // The Blob copies the view's bytes (only those), so no copy first; the bytes are never a
    // SharedArrayBuffer's (fetched, decompressed), which is all the type leaves open.
    const bitmap = await createImageBitmap(new Blob([image.data as Uint8Array<ArrayBuffer>], { type }));
    try {
      if (!isCurrent()) return false;
      if (canvas.width !== bitmap.width) canvas.width = bitmap.width;
      if (canvas.height !== bitmap.height) canvas.height = bitmap.height;
      const ctx = canvas.getContext('2d');
      if (!ctx) return false;
      ctx.drawImage(bitmap, 0, 0);
    } finally {
      bitmap.close();
    }
  }
  canvas.dataset.frameLogTime = logTimeNs.toString();
  return true;
}
