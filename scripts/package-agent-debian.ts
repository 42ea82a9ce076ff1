/**
 * The Debian text formats the agent's package carries, made from the project's own files:
 * the version, the changelog (from CHANGELOG.md) and the machine-readable copyright file
 * (DEP-5, with every bundled npm package's license text).
 */

/**
 * npm's version as Debian orders it: a prerelease sorts before its release in semver, and `~`
 * does that in Debian (`0.3.0-rc.1` would otherwise read as upstream 0.3.0, revision rc.1).
 */
export function debianVersion(npmVersion: string): string {
  if (!/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/.test(npmVersion)) throw new Error(`agent/package.json version ${npmVersion} is not a semver version`);
  return npmVersion.replace('-', '~');
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

function rfc2822(isoDate: string): string {
  const d = new Date(`${isoDate}T00:00:00Z`);
  if (Number.isNaN(d.getTime())) throw new Error(`CHANGELOG.md: ${isoDate} is not a date (YYYY-MM-DD)`);
  return `${DAYS[d.getUTCDay()]}, ${String(d.getUTCDate()).padStart(2, '0')} ${MONTHS[d.getUTCMonth()]} ${d.getUTCFullYear()} 00:00:00 +0000`;
}

/** Words joined into lines of at most `width`, the first prefixed by `first`, the others by `rest`. */
function wrap(text: string, first: string, rest: string, width = 78): string[] {
  const lines: string[] = [];
  let line = first;
  for (const word of text.split(/\s+/).filter(Boolean)) {
    const prefix = lines.length === 0 ? first : rest;
    if (line.length > prefix.length && line.length + 1 + word.length > width) {
      lines.push(line);
      line = rest + word;
    } else {
      line += (line.length > prefix.length ? ' ' : '') + word;
    }
  }
  lines.push(line);
  return lines;
}

/**
 * debian/changelog from CHANGELOG.md: one entry per `## <version> (<YYYY-MM-DD>)` section, newest
 * first as the file has them, its items those of "What changed for a robot".
 */
export function debianChangelog(markdown: string, pkg: string, maintainer: string): string {
  const entries: string[] = [];
  const sections = markdown.split(/^## /m).slice(1);
  for (const section of sections) {
    const [heading = '', ...body] = section.split('\n');
    const m = /^(\S+) \((\d{4}-\d{2}-\d{2})\)\s*$/.exec(heading);
    if (!m) throw new Error(`CHANGELOG.md: "## ${heading}" is not "## <version> (<YYYY-MM-DD>)"`);
    const items: string[] = [];
    let inChanges = false;
    for (const line of body) {
      if (line.startsWith('### ')) inChanges = /what changed/i.test(line);
      else if (inChanges && line.startsWith('- ')) items.push(line.slice(2));
      else if (inChanges && /^\s+\S/.test(line) && items.length > 0) items[items.length - 1] += ' ' + line.trim();
    }
    if (items.length === 0) throw new Error(`CHANGELOG.md: ${m[1]} has no items under "### What changed for a robot"`);
    entries.push(
      [
        `${pkg} (${debianVersion(m[1]!)}) stable; urgency=medium`,
        '',
        ...items.flatMap((i) => wrap(i, '  * ', '    ')),
        '',
        ` -- ${maintainer}  ${rfc2822(m[2]!)}`,
        '',
      ].join('\n'),
    );
  }
  if (entries.length === 0) throw new Error('CHANGELOG.md has no "## <version> (<date>)" section');
  return entries.join('\n');
}

export interface BundledLicense {
  /** Where the package is installed, relative to /. */
  readonly path: string;
  readonly manifest: { name: string; version: string; license?: string | { type?: string }; author?: string | { name?: string } };
  /** The texts of its LICENSE/COPYING files. */
  readonly licenseTexts: readonly string[];
}

const APACHE_REFERENCE = 'On Debian systems the full text of the Apache License 2.0 is in /usr/share/common-licenses/Apache-2.0.';

/** An SPDX expression as DEP-5 writes it: `(MIT OR Apache-2.0)` is `MIT or Apache-2.0`. */
function dep5License(spdx: string): string {
  return spdx.replace(/[()]/g, '').replace(/\s+OR\s+/g, ' or ').replace(/\s+AND\s+/g, ' and ').trim();
}

/** Free text as a DEP-5 field continuation: each line indented by one space, an empty line as ` .`. */
function continuation(text: string): string[] {
  return text
    .replace(/\r\n?/g, '\n')
    .replace(/\t/g, '    ')
    .trimEnd()
    .split('\n')
    .map((l) => (l.trim() === '' ? ' .' : ` ${l.trimEnd()}`));
}

/** The Copyright field: the license text's own copyright lines, else its author, else its authors at large. */
function copyrightHolders(b: BundledLicense): string[] {
  const lines = b.licenseTexts.flatMap((t) => t.split(/\r?\n/)).map((l) => l.trim()).filter((l) => /^copyright\b.*\d{4}/i.test(l));
  const unique = [...new Set(lines.map((l) => l.replace(/^copyright\s*(\(c\)|©)?\s*/i, '')))];
  if (unique.length > 0) return unique;
  const author = typeof b.manifest.author === 'string' ? b.manifest.author : b.manifest.author?.name;
  return [author ?? `the ${b.manifest.name} authors`];
}

/** DEP-5 copyright: the project's own paragraphs (`header`), then one Files paragraph per bundled package. */
export function dep5Copyright(header: string, bundled: readonly BundledLicense[]): string {
  const paragraphs = [header.trimEnd()];
  for (const b of [...bundled].sort((x, y) => x.path.localeCompare(y.path))) {
    const raw = typeof b.manifest.license === 'string' ? b.manifest.license : b.manifest.license?.type;
    if (!raw) throw new Error(`${b.manifest.name}@${b.manifest.version} names no license in its package.json`);
    const license = dep5License(raw);
    // Debian ships the Apache license once, in common-licenses; a copy of it here is a lintian error.
    const text = license === 'Apache-2.0' ? APACHE_REFERENCE : b.licenseTexts.length > 0 ? b.licenseTexts.join('\n\n') : null;
    if (text === null) throw new Error(`${b.manifest.name}@${b.manifest.version} (${license}) ships no license file`);
    const [first, ...more] = copyrightHolders(b);
    paragraphs.push(
      [
        `Files: ${b.path}/*`,
        `Comment: ${b.manifest.name} ${b.manifest.version}`,
        `Copyright: ${first}`,
        ...more.map((c) => ` ${c}`),
        `License: ${license}`,
        ...continuation(text),
      ].join('\n'),
    );
  }
  return paragraphs.join('\n\n') + '\n';
}
