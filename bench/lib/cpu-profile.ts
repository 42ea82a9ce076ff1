/**
 * The top self-time functions of a V8 CPU profile (what `node --cpu-prof` writes): each sample's
 * time delta goes to the node it hit, nodes of one function (same name, script and line) summed.
 */

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface SelfTime {
  name: string;
  /** Script (repository-relative or package) and 1-based line. */
  where: string;
  selfMs: number;
  percent: number;
}

function shortUrl(url: string): string {
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) return url.slice(nm + 'node_modules/'.length);
  const packages = url.indexOf('/packages/');
  if (packages >= 0) return url.slice(packages + 1);
  return url.replace(/^file:\/\//, '');
}

export function topSelfTime(profile: CpuProfile, n: number): SelfTime[] {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const totals = new Map<string, SelfTime>();
  let all = 0;
  for (const [i, id] of profile.samples.entries()) {
    const dt = (profile.timeDeltas[i] ?? 0) / 1000;
    all += dt;
    const frame = byId.get(id)?.callFrame;
    if (frame === undefined) continue;
    const name = frame.functionName || '(anonymous)';
    const where = frame.url ? `${shortUrl(frame.url)}:${frame.lineNumber + 1}` : '';
    const key = `${name}\0${where}`;
    const t = totals.get(key) ?? { name, where, selfMs: 0, percent: 0 };
    t.selfMs += dt;
    totals.set(key, t);
  }
  return [...totals.values()]
    .sort((a, b) => b.selfMs - a.selfMs)
    .slice(0, n)
    .map((t) => ({ ...t, percent: all > 0 ? (t.selfMs / all) * 100 : 0 }));
}
