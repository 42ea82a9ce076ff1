/**
 * `npm run package:agent [-- --arch arm64] [--out DIR] [--no-build] [--better-sqlite3 FILE]`:
 * builds dist-pkg/fleet-agent_<version>_<arch>.deb with dpkg-deb from this checkout.
 *
 * The package holds the built agent, the workspaces it depends on (SHIPPED_WORKSPACES), and the
 * agent's production dependencies copied from the installed node_modules (its package.json
 * "dependencies", closure), stripped of what is not needed at run time. better-sqlite3 is native: the package carries the binary built
 * in this checkout, which is why an arm64 package is built on an arm64 machine (or handed an
 * arm64 better_sqlite3.node with --better-sqlite3; docs/robots.md).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, readSync, closeSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { debianChangelog, debianVersion, dep5Copyright, type BundledLicense } from './package-agent-debian.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const PACKAGING = join(REPO, 'packaging', 'agent');
const PKG = 'fleet-agent';
/** Where the agent lives on the robot; it is the agent's package root (package.json, dist/, bin/, node_modules/). */
const LIB = 'usr/lib/fleet-agent';
/** Where bookworm's debhelper installs units (lintian accepts /lib and /usr/lib; debhelper moved to /usr/lib with trixie). */
const UNIT_DIR = 'lib/systemd/system';

/** The workspaces the agent depends on, which ship with it (built, as dependencies in node_modules), by their directory. */
const SHIPPED_WORKSPACES: Readonly<Record<string, string>> = {
  '@fleet/protocol': join(REPO, 'packages', 'protocol'),
  '@fleet/node-support': join(REPO, 'packages', 'node-support'),
};
/** Workspaces shipped in the package, by the directory their node_modules map to. */
const WORKSPACE_ROOTS: readonly { src: string; dest: string }[] = [
  { src: join(REPO, 'agent'), dest: LIB },
  ...Object.entries(SHIPPED_WORKSPACES).map(([name, src]) => ({ src, dest: `${LIB}/node_modules/${name}` })),
  { src: REPO, dest: LIB },
];
/** Dependencies a package declares but uses only when npm installs it (better-sqlite3 fetches prebuilt binaries with it). */
const INSTALL_TIME_ONLY: Readonly<Record<string, readonly string[]>> = { 'better-sqlite3': ['prebuild-install'] };
/**
 * Directories no package needs at run time, at a package's top only: deeper down the same names
 * hold code (yaml's dist/doc/ is its document model). Nested node_modules are never copied
 * wholesale: those in the closure are copied on their own.
 */
const STRIP_TOP_DIRS = new Set(['test', 'tests', '__tests__', 'fixture', 'fixtures', 'docs', 'doc', 'example', 'examples', 'benchmark', 'benchmarks', 'bench', 'coverage']);
// HTML pages are packages' documentation sites (pino's loads scripts from CDNs: lintian's privacy-breach).
const STRIP_FILE = /(\.d\.[cm]?ts|\.[cm]?ts|\.map|\.tsbuildinfo|\.md|\.markdown|\.html)$|^(README|CHANGELOG|HISTORY|CHANGES)(\.\w+)?$/i;
/** Packages of type declarations only, which some packages list as dependencies. */
const TYPES_ONLY = (name: string) => name.startsWith('@types/') || name === 'undici-types';
const LICENSE_FILE = /^(LICEN[CS]E|COPYING)([.-]\w+)*$/i;
/** ELF e_machine of each Debian architecture the robots run. */
const ELF_MACHINE: Readonly<Record<string, number>> = { amd64: 0x3e, arm64: 0xb7, armhf: 0x28 };

interface Options {
  arch: string;
  out: string;
  build: boolean;
  betterSqlite3?: string;
}

function usage(message: string): never {
  process.stderr.write(`package-agent: ${message}\nusage: npm run package:agent -- [--arch amd64|arm64] [--out DIR] [--no-build] [--better-sqlite3 FILE]\n`);
  process.exit(2);
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = { arch: run('dpkg', ['--print-architecture']).trim(), out: join(REPO, 'dist-pkg'), build: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = () => argv[++i] ?? usage(`${a} needs a value`);
    if (a === '--arch') o.arch = value();
    else if (a === '--out') o.out = resolve(value());
    else if (a === '--no-build') o.build = false;
    else if (a === '--better-sqlite3') o.betterSqlite3 = resolve(value());
    else usage(`unknown argument ${a}`);
  }
  if (!(o.arch in ELF_MACHINE)) usage(`--arch ${o.arch}: one of ${Object.keys(ELF_MACHINE).join(', ')}`);
  return o;
}

function run(cmd: string, args: readonly string[], opts: { cwd?: string } = {}): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], ...opts });
}

interface Manifest {
  name: string;
  version: string;
  license?: string | { type?: string };
  author?: string | { name?: string };
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

const readManifest = (dir: string): Manifest => JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;

/** Node's lookup: `name` in the nearest node_modules at or above `fromDir`, inside the checkout. */
function resolvePackage(name: string, fromDir: string): string | null {
  for (let dir = fromDir; dir.startsWith(REPO); dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return realpathSync(candidate);
    if (dir === REPO) break;
  }
  return null;
}

/** Where a package directory of the checkout goes in the package (its place relative to its workspace root). */
function destinationOf(dir: string): string {
  const root = WORKSPACE_ROOTS.find((r) => dir === r.src || dir.startsWith(r.src + sep));
  if (!root) throw new Error(`${dir} is outside the checkout`);
  return join(root.dest, relative(root.src, dir));
}

/**
 * The agent's production closure: every package reached from agent/package.json "dependencies"
 * (and optional and peer dependencies that are installed), as { source dir -> destination }.
 */
function productionClosure(): Map<string, string> {
  const found = new Map<string, string>();
  const byDest = new Map<string, string>();
  const visit = (dir: string, manifest: Manifest) => {
    const skip = new Set(INSTALL_TIME_ONLY[manifest.name] ?? []);
    const wanted: [string, boolean][] = [
      ...Object.keys(manifest.dependencies ?? {}).map((n): [string, boolean] => [n, true]),
      ...Object.keys(manifest.optionalDependencies ?? {}).map((n): [string, boolean] => [n, false]),
      ...Object.keys(manifest.peerDependencies ?? {}).map((n): [string, boolean] => [n, !manifest.peerDependenciesMeta?.[n]?.optional]),
    ];
    for (const [name, required] of wanted) {
      if (skip.has(name) || TYPES_ONLY(name)) continue;
      const dep = resolvePackage(name, dir);
      if (dep === null) {
        if (required) throw new Error(`${manifest.name} needs ${name}, which is not installed (run npm ci)`);
        continue;
      }
      if (found.has(dep)) continue;
      const isWorkspace = !dep.split(sep).includes('node_modules');
      if (isWorkspace && !(name in SHIPPED_WORKSPACES)) throw new Error(`${manifest.name} depends on the workspace ${name}: only ${Object.keys(SHIPPED_WORKSPACES).join(', ')} ship with the agent`);
      const dest = isWorkspace ? `${LIB}/node_modules/${name}` : destinationOf(dep);
      const other = byDest.get(dest);
      if (other !== undefined && other !== dep) throw new Error(`${dep} and ${other} would both be installed as ${dest}`);
      found.set(dep, dest);
      byDest.set(dest, dep);
      visit(dep, readManifest(dep));
    }
  };
  visit(join(REPO, 'agent'), readManifest(join(REPO, 'agent')));
  return found;
}

/** A built workspace: its package.json (the fields Node reads) and the dist/ files that have a source (a stale output of a removed module stays behind). */
function copyWorkspace(srcDir: string, dest: string, extra: readonly string[] = []): void {
  const m = JSON.parse(readFileSync(join(srcDir, 'package.json'), 'utf8')) as Record<string, unknown>;
  const keep = ['name', 'version', 'private', 'type', 'bin', 'exports', 'dependencies'];
  const trimmed = Object.fromEntries(keep.filter((k) => k in m).map((k) => [k, m[k]]));
  mkdirSync(dest, { recursive: true });
  writeFileSync(join(dest, 'package.json'), JSON.stringify(trimmed, null, 2) + '\n');
  const dist = join(srcDir, 'dist');
  if (!existsSync(dist)) throw new Error(`${dist} is missing: build first (npm run build)`);
  cpSync(dist, join(dest, 'dist'), {
    recursive: true,
    filter: (p) => {
      if (statSync(p).isDirectory()) return true;
      if (!p.endsWith('.js') || p.endsWith('.d.js')) return false;
      return existsSync(join(srcDir, 'src', relative(dist, p)).replace(/\.js$/, '.ts'));
    },
  });
  for (const e of extra) cpSync(join(srcDir, e), join(dest, e), { recursive: true });
}

/** A dependency, without its nested node_modules (those in the closure are copied on their own) or what only development uses; its license files are returned, not copied. */
function copyDependency(srcDir: string, dest: string, licenses: string[]): void {
  const name = readManifest(srcDir).name;
  if (name === 'better-sqlite3') {
    // Its sources (deps/, src/) and build intermediates are 10 times the size of what runs.
    mkdirSync(join(dest, 'build', 'Release'), { recursive: true });
    copyFileSync(join(srcDir, 'package.json'), join(dest, 'package.json'));
    cpSync(join(srcDir, 'lib'), join(dest, 'lib'), { recursive: true });
    copyFileSync(join(srcDir, 'build', 'Release', 'better_sqlite3.node'), join(dest, 'build', 'Release', 'better_sqlite3.node'));
  } else {
    cpSync(srcDir, dest, {
      recursive: true,
      filter: (p) => {
        if (p === srcDir) return true;
        const b = basename(p);
        if (b.startsWith('.')) return false;
        if (lstatSync(p).isDirectory()) return b !== 'node_modules' && !(dirname(p) === srcDir && STRIP_TOP_DIRS.has(b));
        if (dirname(p) === srcDir && LICENSE_FILE.test(b)) return false;
        return !STRIP_FILE.test(b);
      },
    });
  }
  for (const b of readdirSync(srcDir)) if (LICENSE_FILE.test(b) && statSync(join(srcDir, b)).isFile()) licenses.push(join(srcDir, b));
}

function elfMachine(file: string): number {
  const fd = openSync(file, 'r');
  try {
    const head = Buffer.alloc(20);
    readSync(fd, head, 0, 20, 0);
    if (head.toString('latin1', 0, 4) !== '\x7fELF') throw new Error(`${file} is not an ELF file`);
    return head.readUInt16LE(18);
  } finally {
    closeSync(fd);
  }
}

/** Libraries the native module links against, as Debian dependencies (dpkg-shlibdeps, which needs a debian/control to run in). */
function sharedLibraryDepends(nodeFile: string, arch: string, native: boolean): string {
  if (!native) return 'libc6, libgcc-s1, libstdc++6';
  const dir = mkdtempSync(join(tmpdir(), 'fleet-shlibdeps-'));
  try {
    mkdirSync(join(dir, 'debian'));
    writeFileSync(join(dir, 'debian', 'control'), `Source: ${PKG}\n\nPackage: ${PKG}\nArchitecture: ${arch}\n`);
    const out = execFileSync('dpkg-shlibdeps', ['-O', `-e${nodeFile}`], { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const m = /^shlibs:Depends=(.*)$/m.exec(out);
    if (!m?.[1]) throw new Error(`dpkg-shlibdeps gave no dependencies for ${nodeFile}: ${out}`);
    return m[1];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Regular modes (dpkg-deb warns on odd ones, lintian on scripts that cannot run): 0755 for directories and scripts, 0644 for the rest. */
function normalizeModes(dir: string): void {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      normalizeModes(p);
      // What stripping emptied (a src/ of .ts files only) goes too.
      if (readdirSync(p).length === 0) rmSync(p, { recursive: true });
      else chmodSync(p, 0o755);
    } else if (e.isFile()) {
      const script = readFileSync(p).subarray(0, 2).toString('latin1') === '#!';
      chmodSync(p, script ? 0o755 : 0o644);
    }
  }
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() || e.isSymbolicLink())
    .map((e) => join(e.parentPath, e.name))
    .sort();
}

/** The Debian tools the build runs, with the package that brings each. */
const TOOLS: readonly [string, string][] = [
  ['dpkg-deb', 'dpkg'],
  ['dpkg-shlibdeps', 'dpkg-dev'],
  ['strip', 'binutils'],
];

function main(): void {
  const missing = TOOLS.filter(([tool]) => execFileSync('sh', ['-c', `command -v ${tool} || true`], { encoding: 'utf8' }).trim() === '');
  if (missing.length > 0) usage(`${missing.map(([t]) => t).join(', ')} missing: apt-get install ${[...new Set(missing.map(([, p]) => p))].join(' ')}`);
  const opts = parseArgs(process.argv.slice(2));
  if (opts.build) {
    // Incremental: nothing to do when `npm run build` already ran.
    const tsc = join(REPO, 'node_modules', 'typescript', 'bin', 'tsc');
    execFileSync(process.execPath, [tsc, '-b', join(REPO, 'agent', 'tsconfig.json')], { stdio: 'inherit' });
  }
  const agent = readManifest(join(REPO, 'agent'));
  const version = debianVersion(agent.version);
  const nativeArch = run('dpkg', ['--print-architecture']).trim() === opts.arch;

  mkdirSync(opts.out, { recursive: true });
  // Outside the checkout, so that nothing in the staged tree resolves from its node_modules.
  const stage = mkdtempSync(join(tmpdir(), 'fleet-agent-deb-'));
  try {
    const lib = join(stage, LIB);
    copyWorkspace(join(REPO, 'agent'), lib, ['bin']);
    for (const [name, src] of Object.entries(SHIPPED_WORKSPACES)) copyWorkspace(src, join(lib, 'node_modules', ...name.split('/')));

    const bundled: BundledLicense[] = [];
    for (const [src, dest] of productionClosure()) {
      if (Object.values(SHIPPED_WORKSPACES).includes(src)) continue; // a workspace, copied above
      const licenses: string[] = [];
      copyDependency(src, join(stage, dest), licenses);
      const m = readManifest(src);
      bundled.push({ path: dest, manifest: m, licenseTexts: licenses.map((f) => readFileSync(f, 'utf8')) });
    }

    const nodeFile = join(stage, LIB, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
    if (opts.betterSqlite3) copyFileSync(opts.betterSqlite3, nodeFile);
    const machine = elfMachine(nodeFile);
    if (machine !== ELF_MACHINE[opts.arch]) {
      throw new Error(
        `better_sqlite3.node is built for ELF machine 0x${machine.toString(16)}, not ${opts.arch}: build the package on an ${opts.arch} machine, or pass --better-sqlite3 with a binary built for ${opts.arch} and Node ${process.versions.node.split('.')[0]}`,
      );
    }
    // Unstripped, the module is several times larger; the symbols help no one on a robot (the
    // sections dh_strip removes too).
    if (nativeArch) execFileSync('strip', ['--remove-section=.comment', '--remove-section=.note', '--strip-unneeded', nodeFile]);

    const bin = join(stage, 'usr', 'bin');
    mkdirSync(bin, { recursive: true });
    writeFileSync(join(bin, PKG), `#!/bin/sh\nexec /usr/bin/node /${LIB}/bin/fleet-agent.js "$@"\n`, { mode: 0o755 });

    const man = join(stage, 'usr', 'share', 'man', 'man1');
    mkdirSync(man, { recursive: true });
    writeFileSync(join(man, `${PKG}.1.gz`), gzipSync(readFileSync(join(PACKAGING, `${PKG}.1`)), { level: 9 }));

    mkdirSync(join(stage, 'etc', PKG), { recursive: true });
    copyFileSync(join(PACKAGING, 'agent.yaml'), join(stage, 'etc', PKG, 'agent.yaml'));
    mkdirSync(join(stage, UNIT_DIR), { recursive: true });
    copyFileSync(join(PACKAGING, `${PKG}.service`), join(stage, UNIT_DIR, `${PKG}.service`));

    const control = readFileSync(join(PACKAGING, 'control'), 'utf8');
    const maintainer = /^Maintainer: (.*)$/m.exec(control)?.[1] ?? usage('packaging/agent/control has no Maintainer');
    const doc = join(stage, 'usr', 'share', 'doc', PKG);
    mkdirSync(doc, { recursive: true });
    writeFileSync(join(doc, 'copyright'), dep5Copyright(readFileSync(join(PACKAGING, 'copyright'), 'utf8'), bundled));
    // A native package (no Debian revision): lintian wants changelog.gz, compressed with -9n.
    const changelog = debianChangelog(readFileSync(join(REPO, 'CHANGELOG.md'), 'utf8'), PKG, maintainer);
    if (!changelog.startsWith(`${PKG} (${version})`)) throw new Error(`CHANGELOG.md has no section for ${agent.version} first`);
    writeFileSync(join(doc, 'changelog.gz'), gzipSync(changelog, { level: 9 }));
    // The ROS 2 examples docs/robots.md points agent.yaml at: an action wrapper and a button node.
    const examples = join(doc, 'examples');
    mkdirSync(examples, { recursive: true });
    for (const f of ['ros2-action.py', 'ros2-button.py']) copyFileSync(join(REPO, 'docs', 'examples', f), join(examples, f));

    normalizeModes(stage);
    if (nativeArch) {
      // The staged tree runs on its own (nothing resolved from the checkout): its CLI loads and
      // knows its version. The package test then runs the installed agent against a cloud.
      const printed = run(process.execPath, [join(lib, 'bin', 'fleet-agent.js'), '--version'], { cwd: stage }).trim();
      if (printed !== agent.version) throw new Error(`the staged fleet-agent --version printed ${printed}, not ${agent.version}`);
    }

    // Installed-Size as dpkg-gencontrol counts it: KiB per file, rounded up, plus one per directory.
    const files = filesUnder(stage);
    let kib = 0;
    for (const f of files) kib += Math.ceil(statSync(f).size / 1024);
    kib += readdirSync(stage, { recursive: true, withFileTypes: true }).filter((e) => e.isDirectory()).length;

    const nodeMajor = Number(process.versions.node.split('.')[0]);
    // better-sqlite3 is built against one Node ABI (NODE_MODULE_VERSION): another major cannot load it.
    const depends = [`nodejs (>= ${nodeMajor})`, `nodejs (<< ${nodeMajor + 1})`, 'adduser', sharedLibraryDepends(nodeFile, opts.arch, nativeArch)].join(', ');

    const debian = join(stage, 'DEBIAN');
    mkdirSync(debian);
    writeFileSync(
      join(debian, 'control'),
      control.replace('@VERSION@', version).replace('@ARCH@', opts.arch).replace('@INSTALLED_SIZE@', String(kib)).replace('@DEPENDS@', depends),
    );
    writeFileSync(join(debian, 'conffiles'), `/etc/${PKG}/agent.yaml\n`);
    writeFileSync(join(debian, 'md5sums'), files.map((f) => `${createHash('md5').update(readFileSync(f)).digest('hex')}  ${relative(stage, f)}`).join('\n') + '\n');
    for (const script of ['postinst', 'prerm', 'postrm']) {
      copyFileSync(join(PACKAGING, script), join(debian, script));
      chmodSync(join(debian, script), 0o755);
    }
    for (const f of ['control', 'conffiles', 'md5sums']) chmodSync(join(debian, f), 0o644);
    chmodSync(debian, 0o755);
    chmodSync(stage, 0o755);

    const deb = join(opts.out, `${PKG}_${version}_${opts.arch}.deb`);
    run('dpkg-deb', ['--root-owner-group', '-Zxz', '--build', stage, deb]);
    const size = statSync(deb).size;
    process.stdout.write(`${relative(process.cwd(), deb) || deb}: ${(size / 1024 / 1024).toFixed(1)} MiB (${kib} KiB installed, ${bundled.length} npm packages)\n`);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

try {
  main();
} catch (err) {
  // A failed build or dpkg-deb has printed its own output already (stderr is inherited).
  process.stderr.write(`package-agent: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
