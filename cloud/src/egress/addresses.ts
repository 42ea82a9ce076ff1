/**
 * The SSRF address table: which IP addresses an outbound request (webhooks, grant providers,
 * destination checks) may connect to. Only globally routable unicast addresses are `public`;
 * everything else is refused with the reason. IPv6 forms that embed an IPv4 address
 * (IPv4-mapped, IPv4-compatible, SIIT, NAT64, 6to4) are judged by the address they embed, and
 * mapped/compatible forms are refused even when the embedded address is public (a resolver has
 * no business answering them).
 */
import { BlockList, isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { LRUCache } from 'lru-cache';

export type AddressRefusal =
  | 'invalid'
  | 'unspecified'
  | 'loopback'
  | 'private'
  | 'link_local'
  | 'cgnat'
  | 'multicast'
  | 'broadcast'
  | 'reserved'
  | 'benchmarking'
  | 'documentation'
  | 'metadata'
  | 'ipv4_mapped'
  | 'ipv4_compatible'
  | 'teredo';

export type AddressClass = 'public' | AddressRefusal;

type Family = 'ipv4' | 'ipv6';
type Rule = readonly [network: string, prefix: number];

/** Builds an ordered table of (reason, BlockList); the first matching reason wins. */
function table(family: Family, rows: readonly (readonly [AddressRefusal, readonly Rule[]])[]) {
  return rows.map(([reason, rules]) => {
    const list = new BlockList();
    for (const [network, prefix] of rules) list.addSubnet(network, prefix, family);
    return [reason, list] as const;
  });
}

const V4_TABLE = table('ipv4', [
  // Cloud metadata endpoints first, so they are reported as such (they sit in other ranges).
  ['metadata', [['169.254.169.254', 32], ['100.100.100.200', 32], ['168.63.129.16', 32], ['192.0.0.192', 32]]],
  ['broadcast', [['255.255.255.255', 32]]],
  ['unspecified', [['0.0.0.0', 8]]],
  ['loopback', [['127.0.0.0', 8]]],
  ['private', [['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16]]],
  ['link_local', [['169.254.0.0', 16]]],
  ['cgnat', [['100.64.0.0', 10]]],
  ['benchmarking', [['198.18.0.0', 15]]],
  ['documentation', [['192.0.2.0', 24], ['198.51.100.0', 24], ['203.0.113.0', 24]]],
  ['multicast', [['224.0.0.0', 4]]],
  // 240/4 (future use), IETF protocol assignments, the deprecated 6to4 relay anycast.
  ['reserved', [['240.0.0.0', 4], ['192.0.0.0', 24], ['192.88.99.0', 24]]],
]);

const V6_TABLE = table('ipv6', [
  ['unspecified', [['::', 128]]],
  ['loopback', [['::1', 128]]],
  ['metadata', [['fd00:ec2::254', 128]]],
  // Teredo tunnels to an obfuscated IPv4 address; refused outright.
  ['teredo', [['2001::', 32]]],
  ['benchmarking', [['2001:2::', 48]]],
  ['documentation', [['2001:db8::', 32], ['3fff::', 20]]],
  // IETF protocol assignments (ORCHID etc.), discard-only.
  ['reserved', [['2001::', 23], ['100::', 64]]],
  // Unique local, deprecated site-local, and the local-use NAT64 prefix (RFC 8215).
  ['private', [['fc00::', 7], ['fec0::', 10], ['64:ff9b:1::', 48]]],
  ['link_local', [['fe80::', 10]]],
  ['multicast', [['ff00::', 8]]],
]);

/** Prefixes whose addresses embed an IPv4 address, with where it sits. */
const EMBEDDED_V4 = [
  { kind: 'ipv4_mapped', net: '::ffff:0:0', prefix: 96, at: 12, alwaysRefused: true }, // ::ffff:a.b.c.d
  { kind: 'ipv4_mapped', net: '::ffff:0:0:0', prefix: 96, at: 12, alwaysRefused: true }, // SIIT translated
  { kind: 'ipv4_compatible', net: '::', prefix: 96, at: 12, alwaysRefused: true }, // ::a.b.c.d (deprecated)
  { kind: 'nat64', net: '64:ff9b::', prefix: 96, at: 12, alwaysRefused: false }, // RFC 6052 well-known
  { kind: '6to4', net: '2002::', prefix: 16, at: 2, alwaysRefused: false }, // 2002:AABB:CCDD::/48
].map((row) => {
  const list = new BlockList();
  list.addSubnet(row.net, row.prefix, 'ipv6');
  return { ...row, list };
});

/** ::/127: `::` and `::1`, which sit in the IPv4-compatible ::/96 but are not of it. */
const UNSPECIFIED_OR_LOOPBACK_V6 = new BlockList();
UNSPECIFIED_OR_LOOPBACK_V6.addSubnet('::', 127, 'ipv6');

const GLOBAL_UNICAST_V6 = new BlockList();
GLOBAL_UNICAST_V6.addSubnet('2000::', 3, 'ipv6');

function firstMatch(rows: typeof V4_TABLE, address: string, family: Family): AddressRefusal | undefined {
  for (const [reason, list] of rows) if (list.check(address, family)) return reason;
  return undefined;
}

function classifyV4(ip: string): AddressClass {
  return firstMatch(V4_TABLE, ip, 'ipv4') ?? 'public';
}

function classifyV6(ip: string): AddressClass {
  // Embedded-IPv4 forms first: ::ffff:127.0.0.1 is loopback, whatever the tables say about ::/8.
  for (const row of EMBEDDED_V4) {
    if (!row.list.check(ip, 'ipv6')) continue;
    // :: and ::1 are the unspecified and loopback addresses, not IPv4-compatible ones.
    if (row.kind === 'ipv4_compatible' && UNSPECIFIED_OR_LOOPBACK_V6.check(ip, 'ipv6')) break;
    // isIP vetted the text (no zone, no octal or hex quad): ipaddr.js only turns it into bytes.
    // Only the embedded four are read: ipaddr.js spells the deprecated `::a.b.c.d` as
    // ::ffff:a.b.c.d (bytes 10 and 11 set), where RFC 4291 has it IPv4-compatible (::/96).
    const b = ipaddr.IPv6.parse(ip).toByteArray();
    const v4 = `${b[row.at]}.${b[row.at + 1]}.${b[row.at + 2]}.${b[row.at + 3]}`;
    const inner = classifyV4(v4);
    if (inner !== 'public') return inner;
    return row.alwaysRefused ? (row.kind as AddressRefusal) : 'public';
  }
  const reason = firstMatch(V6_TABLE, ip, 'ipv6');
  if (reason !== undefined) return reason;
  // Outside 2000::/3 nothing is assigned as global unicast.
  return GLOBAL_UNICAST_V6.check(ip, 'ipv6') ? 'public' : 'reserved';
}

/**
 * Classifies an IP address as `public` (an outbound request may connect to it) or the reason it
 * is refused. Accepts IPv4 dotted quads and IPv6 (with or without brackets or a zone id);
 * anything else is `invalid`. Host names are not resolved here: see {@link parseHostLiteral}.
 */
export const classifyAddress: (ip: string) => AddressClass = rememberedByText(classifyText, 4096);

/**
 * `fn`, remembering its answers by their text: for pure functions of short strings (addresses,
 * URLs) that every outbound attempt asks again for the same place. At most `kept` answers are
 * held (the least recently used goes when full: a few hundred KiB at most); a call that throws
 * is not remembered.
 */
export function rememberedByText<T>(fn: (text: string) => T, kept: number): (text: string) => T {
  // Boxed: an LRUCache does not hold `undefined`, which is an answer like any other here.
  const answers = new LRUCache<string, { answer: T }>({ max: kept });
  return (text) => {
    let held = answers.get(text);
    if (held === undefined) {
      held = { answer: fn(text) };
      answers.set(text, held);
    }
    return held.answer;
  };
}

function classifyText(ip: string): AddressClass {
  let text = ip.trim();
  if (text.startsWith('[') && text.endsWith(']')) text = text.slice(1, -1);
  const zone = text.indexOf('%');
  if (zone !== -1) text = text.slice(0, zone);
  switch (isIP(text)) {
    case 4:
      return classifyV4(text);
    case 6:
      return classifyV6(text.toLowerCase());
    default:
      return 'invalid';
  }
}

export interface HostLiteral {
  family: 4 | 6;
  /** The canonical address (dotted quad, or compressed IPv6 without brackets). */
  address: string;
}

/**
 * Returns the IP address a URL host denotes when it is an IP literal, as the WHATWG URL parser
 * (and therefore every HTTP client) reads it: `2130706433`, `0177.0.0.1`, `0x7f.0.0.1` and
 * `127.1` all are 127.0.0.1. Returns `null` for a domain name (to be resolved) and throws a
 * `TypeError` when the host is not valid in a URL at all (e.g. `0x1ffffffff`).
 * Accepts a bare host (`0177.1`, `[::1]`, `::1`) or a host with a port (`127.1:8443`).
 */
export function parseHostLiteral(host: string): HostLiteral | null {
  const bracketed = isIP(host) === 6 ? `[${host}]` : host;
  const hostname = new URL(`https://${bracketed}/`).hostname;
  if (hostname.startsWith('[') && hostname.endsWith(']')) {
    return { family: 6, address: hostname.slice(1, -1) };
  }
  // The URL parser turns every numeric IPv4 form into a dotted quad; a domain stays a domain.
  return isIP(hostname) === 4 ? { family: 4, address: hostname } : null;
}
