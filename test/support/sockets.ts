import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * Which of `pids` owns the TCP socket bound to local port `port` (Linux /proc), or null: tells
 * a local server which process a connection comes from (e.g. which replica sent a webhook).
 */
export function socketOwner(port: number, pids: readonly number[]): number | null {
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    // "sl local_address rem_address st … uid timeout inode": the address is HEXIP:HEXPORT.
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      const local = cols[1];
      if (!local || cols.length < 10) continue;
      if (parseInt(local.slice(local.lastIndexOf(':') + 1), 16) === port && cols[9] !== '0') inodes.add(cols[9]!);
    }
  }
  if (inodes.size === 0) return null;
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let link: string;
      try {
        link = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(link);
      if (m && inodes.has(m[1]!)) return pid;
    }
  }
  return null;
}
