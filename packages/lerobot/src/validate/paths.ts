import { readdir } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';

/** Fills a LeRobot path template such as `data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet`. */
export function formatPath(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{(\w+)(?::0?(\d+)d)?\}/g, (whole, name: string, width?: string) => {
    const value = values[name];
    if (value === undefined) return whole;
    return width === undefined ? String(value) : String(value).padStart(Number(width), '0');
  });
}

/** A regular expression that matches exactly the paths the template can produce. */
export function templatePattern(template: string): RegExp {
  let source = '';
  let last = 0;
  for (const match of template.matchAll(/\{(\w+)(?::0?(\d+)d)?\}/g)) {
    source += escape(template.slice(last, match.index));
    source += match[2] === undefined ? '([^/]+)' : `(\\d{${match[2]},})`;
    last = match.index + match[0].length;
  }
  source += escape(template.slice(last));
  return new RegExp(`^${source}$`);
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Every file under `dir/sub`, as dataset-relative paths with `/`, sorted; [] when absent. */
export async function listFiles(dir: string, sub: string): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(join(dir, sub), { recursive: true, withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  return entries
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)).split(sep).join('/'))
    .sort();
}
