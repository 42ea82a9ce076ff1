import { describe, expect, it } from 'vitest';
import { classifyAddress, parseHostLiteral, rememberedByText, type AddressClass } from './addresses.js';

/** The SSRF address table: address -> verdict. */
const ADDRESSES: readonly (readonly [string, AddressClass])[] = [
  // IPv4: allowed
  ['8.8.8.8', 'public'],
  ['1.1.1.1', 'public'],
  ['93.184.216.34', 'public'],
  ['172.15.255.255', 'public'],
  ['172.32.0.0', 'public'],
  ['100.63.255.255', 'public'],
  ['100.128.0.0', 'public'],
  ['198.17.255.255', 'public'],
  ['198.20.0.0', 'public'],
  ['223.255.255.255', 'public'],
  // IPv4: refused
  ['127.0.0.1', 'loopback'],
  ['127.255.255.254', 'loopback'],
  ['0.0.0.0', 'unspecified'],
  ['0.1.2.3', 'unspecified'],
  ['10.0.0.1', 'private'],
  ['10.255.255.255', 'private'],
  ['172.16.0.1', 'private'],
  ['172.31.255.255', 'private'],
  ['192.168.1.1', 'private'],
  ['169.254.0.1', 'link_local'],
  ['100.64.0.1', 'cgnat'],
  ['100.127.255.255', 'cgnat'],
  ['224.0.0.1', 'multicast'],
  ['239.255.255.250', 'multicast'],
  ['240.0.0.1', 'reserved'],
  ['255.255.255.254', 'reserved'],
  ['255.255.255.255', 'broadcast'],
  ['192.0.0.8', 'reserved'],
  ['192.88.99.1', 'reserved'],
  ['198.18.0.1', 'benchmarking'],
  ['198.19.255.255', 'benchmarking'],
  ['192.0.2.10', 'documentation'],
  ['198.51.100.7', 'documentation'],
  ['203.0.113.99', 'documentation'],
  // Metadata services
  ['169.254.169.254', 'metadata'],
  ['100.100.100.200', 'metadata'],
  ['168.63.129.16', 'metadata'],
  ['fd00:ec2::254', 'metadata'],
  ['[fd00:ec2::254]', 'metadata'],
  // IPv6: allowed
  ['2606:4700:4700::1111', 'public'],
  ['2001:4860:4860::8888', 'public'],
  ['2a00:1450:4001:80b::200e', 'public'],
  ['[2606:4700:4700::1111]', 'public'],
  // IPv6: refused
  ['::1', 'loopback'],
  ['0:0:0:0:0:0:0:1', 'loopback'],
  ['[::1]', 'loopback'],
  ['::', 'unspecified'],
  ['fc00::1', 'private'],
  ['fd12:3456:789a::1', 'private'],
  ['fec0::1', 'private'],
  ['fe80::1', 'link_local'],
  ['fe80::1%eth0', 'link_local'],
  ['febf:ffff::1', 'link_local'],
  ['ff02::1', 'multicast'],
  ['ff0e::1', 'multicast'],
  ['2001:db8::1', 'documentation'],
  ['3fff::1', 'documentation'],
  ['2001:2::1', 'benchmarking'],
  ['2001:10::1', 'reserved'],
  ['100::1', 'reserved'],
  ['4000::1', 'reserved'],
  ['5f00::1', 'reserved'],
  // IPv4-mapped (dotted and hex forms), SIIT, IPv4-compatible
  ['::ffff:127.0.0.1', 'loopback'],
  ['::ffff:7f00:1', 'loopback'],
  ['::FFFF:7F00:0001', 'loopback'],
  ['0:0:0:0:0:ffff:7f00:1', 'loopback'],
  ['::ffff:10.0.0.1', 'private'],
  ['::ffff:a9fe:a9fe', 'metadata'],
  ['::ffff:169.254.169.254', 'metadata'],
  ['::ffff:0.0.0.0', 'unspecified'],
  ['::ffff:8.8.8.8', 'ipv4_mapped'],
  ['::ffff:0:7f00:1', 'loopback'],
  ['::ffff:0:808:808', 'ipv4_mapped'],
  ['::127.0.0.1', 'loopback'],
  ['::7f00:1', 'loopback'],
  ['::8.8.8.8', 'ipv4_compatible'],
  // NAT64 well-known prefix: judged by the embedded address
  ['64:ff9b::127.0.0.1', 'loopback'],
  ['64:ff9b::7f00:1', 'loopback'],
  ['64:ff9b::a00:1', 'private'],
  ['64:ff9b::a9fe:a9fe', 'metadata'],
  ['64:ff9b::808:808', 'public'],
  ['64:ff9b::8.8.8.8', 'public'],
  // Local-use NAT64 prefix: never global
  ['64:ff9b:1::a00:1', 'private'],
  ['64:ff9b:1:808:8:800::', 'private'],
  // 6to4: judged by the embedded address
  ['2002:7f00:1::1', 'loopback'],
  ['2002:a00:1::', 'private'],
  ['2002:c0a8:101::1', 'private'],
  ['2002:a9fe:a9fe::1', 'metadata'],
  ['2002:808:808::1', 'public'],
  // Teredo
  ['2001::1', 'teredo'],
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'teredo'],
  // Not addresses
  ['localhost', 'invalid'],
  ['example.com', 'invalid'],
  ['127.1', 'invalid'],
  ['', 'invalid'],
  ['1.2.3.4.5', 'invalid'],
];

describe('classifyAddress', () => {
  it.each(ADDRESSES)('%s -> %s', (address, expected) => {
    expect(classifyAddress(address)).toBe(expected);
  });
});

/**
 * Tricky spellings, each with the verdict it had when IPv6 addresses were still turned into bytes
 * by hand (before ipaddr.js): mapped and compatible forms in every notation, compressed and
 * zero-padded groups, zone ids, brackets, whitespace, the unspecified forms, and IPv4 that is not
 * a plain dotted quad (the URL parser reads those: see parseHostLiteral; here they are invalid).
 */
const TRICKY: readonly (readonly [string, AddressClass])[] = [
  ['[::ffff:127.0.0.1]', 'loopback'],
  ['::FFFF:127.0.0.1', 'loopback'],
  ['::ffff:127.0.0.1%eth0', 'loopback'],
  ['[::ffff:127.0.0.1%25eth0]', 'loopback'],
  ['0:0:0:0:0:ffff:127.0.0.1', 'loopback'],
  ['0000:0000:0000:0000:0000:ffff:7f00:0001', 'loopback'],
  ['::ffff:7f00:0001', 'loopback'],
  ['::ffff:0:127.0.0.1', 'loopback'],
  ['::ffff:0:0.0.0.0', 'unspecified'],
  ['::ffff:255.255.255.255', 'broadcast'],
  ['::ffff:192.168.1.1', 'private'],
  ['::ffff:100.64.0.1', 'cgnat'],
  ['::ffff:1.1.1.1', 'ipv4_mapped'],
  ['::ffff:0:1.1.1.1', 'ipv4_mapped'],
  ['::0.0.0.0', 'unspecified'],
  ['::0.0.0.1', 'loopback'],
  // ipaddr.js reads `::a.b.c.d` as ::ffff:a.b.c.d: these are where that would show.
  ['0::0.0.0.1', 'loopback'],
  ['0:0:0:0:0:0:0.0.0.1', 'loopback'],
  ['::0.0.0.1%eth0', 'loopback'],
  ['[::0.0.0.1]', 'loopback'],
  ['::0:0.0.0.1', 'loopback'],
  ['::1.0.0.1', 'ipv4_compatible'],
  ['::0.0.1.1', 'unspecified'],
  ['::0.0.0.2', 'unspecified'],
  ['::0.1.0.0', 'unspecified'],
  ['::2', 'unspecified'],
  ['::1:0', 'unspecified'],
  ['::ffff', 'unspecified'],
  ['::fffe:7f00:1', 'reserved'],
  ['::1:ffff:7f00:1', 'reserved'],
  ['1::ffff:7f00:1', 'reserved'],
  ['0::1', 'loopback'],
  ['0:0::0:1', 'loopback'],
  ['::0:1', 'loopback'],
  ['::0', 'unspecified'],
  ['0::', 'unspecified'],
  ['0:0:0:0:0:0:0:0', 'unspecified'],
  ['0000::0000', 'unspecified'],
  [' ::1 ', 'loopback'],
  ['::1%lo', 'loopback'],
  ['fe80::1%25eth0', 'link_local'],
  ['[fe80::1%eth0]', 'link_local'],
  ['fe80::1%', 'link_local'],
  ['ff02::1%eth0', 'multicast'],
  ['64:ff9b::', 'unspecified'],
  ['64:ff9b::0.0.0.0', 'unspecified'],
  ['64:ff9b::255.255.255.255', 'broadcast'],
  ['64:ff9b::1.1.1.1', 'public'],
  ['64:ff9b::c0a8:101', 'private'],
  ['64:FF9B::7F00:1', 'loopback'],
  ['64:ff9b:0:0:0:0:7f00:1', 'loopback'],
  ['64:ff9b:1::8.8.8.8', 'private'],
  ['2002::', 'unspecified'],
  ['2002::1', 'unspecified'],
  ['2002:ffff:ffff::', 'broadcast'],
  ['2002:0808:0808::', 'public'],
  ['2002:c000:0201::', 'documentation'],
  ['2002:6440:1::', 'cgnat'],
  ['2002:e000:1::', 'multicast'],
  ['2002:f000:1::', 'reserved'],
  ['2002:a9fe:a9fe:ffff:ffff:ffff:ffff:ffff', 'metadata'],
  ['2001:0:0:0:0:0:0:1', 'teredo'],
  ['2001:1::1', 'reserved'],
  ['2001:3::1', 'reserved'],
  ['2001:20::1', 'reserved'],
  ['2001:1ff::1', 'reserved'],
  ['2001:200::1', 'public'],
  ['2001:db8:ffff:ffff:ffff:ffff:ffff:ffff', 'documentation'],
  ['2001:db9::1', 'public'],
  ['fd00:ec2::254%eth0', 'metadata'],
  ['fd00:ec2:0:0:0:0:0:254', 'metadata'],
  ['fd00:ec2::255', 'private'],
  ['fbff::1', 'reserved'],
  ['fe00::1', 'reserved'],
  ['feff::1', 'private'],
  ['ff00::', 'multicast'],
  ['1fff:ffff::1', 'reserved'],
  ['2000::', 'public'],
  ['3fff:ffff::1', 'public'],
  ['2400:cb00:2048:1::c629:d7a2', 'public'],
  ['::ffff:8.8.8.8%eth0', 'ipv4_mapped'],
  ['::ffff:08.8.8.8', 'invalid'],
  ['::ffff:010.0.0.1', 'invalid'],
  ['::ffff:0x7f.0.0.1', 'invalid'],
  ['::ffff:127.1', 'invalid'],
  ['::ffff:1.2.3.4.5', 'invalid'],
  ['::ffff:256.0.0.1', 'invalid'],
  [':::1', 'invalid'],
  ['1:2:3:4:5:6:7:8:9', 'invalid'],
  ['1:2:3:4:5:6:7::', 'reserved'],
  ['::1:2:3:4:5:6:7', 'reserved'],
  ['1::2::3', 'invalid'],
  ['12345::1', 'invalid'],
  ['gggg::1', 'invalid'],
  ['::ffff:7f00:1:', 'invalid'],
  ['[::1', 'invalid'],
  ['::1]', 'invalid'],
  ['[[::1]]', 'invalid'],
  ['0.0.0.1', 'unspecified'],
  ['0.255.255.255', 'unspecified'],
  ['00.0.0.0', 'invalid'],
  ['0177.0.0.1', 'invalid'],
  ['0x7f.0.0.1', 'invalid'],
  ['0x7f000001', 'invalid'],
  ['2130706433', 'invalid'],
  ['127.000.000.001', 'invalid'],
  ['127.0.0.01', 'invalid'],
  ['127.0.0.1%eth0', 'loopback'],
  ['[127.0.0.1]', 'loopback'],
  [' 127.0.0.1', 'loopback'],
  ['127.0.0.1 ', 'loopback'],
  ['1.0.0.0', 'public'],
  ['169.254.169.254%eth0', 'metadata'],
];

describe('classifyAddress on tricky forms', () => {
  it.each(TRICKY)('%j -> %s', (address, expected) => {
    expect(classifyAddress(address)).toBe(expected);
  });
});

/** How URL hosts are read: numeric IPv4 forms are normalized by the WHATWG URL parser. */
const URL_HOSTS: readonly (readonly [url: string, address: string | null, verdict: AddressClass | null])[] = [
  ['https://2130706433/', '127.0.0.1', 'loopback'],
  ['https://0177.0.0.1/', '127.0.0.1', 'loopback'],
  ['https://0x7f.0.0.1/', '127.0.0.1', 'loopback'],
  ['https://0x7f000001/', '127.0.0.1', 'loopback'],
  ['https://017700000001/', '127.0.0.1', 'loopback'],
  ['https://127.1/', '127.0.0.1', 'loopback'],
  ['https://127.0.1/', '127.0.0.1', 'loopback'],
  ['https://0/', '0.0.0.0', 'unspecified'],
  ['https://0x0a.0.0.1/', '10.0.0.1', 'private'],
  ['https://012.1/', '10.0.0.1', 'private'],
  ['https://167772161/', '10.0.0.1', 'private'],
  ['https://0xa9.0xfe.0xa9.0xfe/', '169.254.169.254', 'metadata'],
  ['https://2852039166/', '169.254.169.254', 'metadata'],
  ['https://0251.0376.0251.0376/', '169.254.169.254', 'metadata'],
  ['https://0xC0.0xA8.1/', '192.168.0.1', 'private'],
  ['https://127.0.0.1./', '127.0.0.1', 'loopback'],
  ['https://[::1]:8443/', '::1', 'loopback'],
  ['https://[::ffff:127.0.0.1]/', '::ffff:7f00:1', 'loopback'],
  ['https://[0:0:0:0:0:ffff:a9fe:a9fe]/', '::ffff:a9fe:a9fe', 'metadata'],
  ['https://[64:ff9b::10.0.0.1]/', '64:ff9b::a00:1', 'private'],
  ['https://[2002:7f00:1::]/', '2002:7f00:1::', 'loopback'],
  ['https://134744072/', '8.8.8.8', 'public'],
  ['https://0x8.0x8.0x8.0x8/', '8.8.8.8', 'public'],
  ['https://[2606:4700:4700::1111]/', '2606:4700:4700::1111', 'public'],
  // Domain names are left to resolution.
  ['https://example.com/', null, null],
  ['https://localhost:8443/', null, null],
  ['https://0x7f.example/', null, null],
];

describe('parseHostLiteral', () => {
  it.each(URL_HOSTS)('%s -> %s (%s)', (url, address, verdict) => {
    const literal = parseHostLiteral(new URL(url).host);
    expect(literal?.address ?? null).toBe(address);
    expect(literal === null ? null : classifyAddress(literal.address)).toBe(verdict);
  });

  it.each([
    ['2130706433', '127.0.0.1'],
    ['0177.0.0.1', '127.0.0.1'],
    ['0x7f.0.0.1', '127.0.0.1'],
    ['127.1', '127.0.0.1'],
    ['::1', '::1'],
    ['[::ffff:7f00:1]', '::ffff:7f00:1'],
    ['127.1:8443', '127.0.0.1'],
  ])('reads the bare host %s as %s', (host, address) => {
    expect(parseHostLiteral(host)?.address).toBe(address);
  });

  it('reports the family', () => {
    expect(parseHostLiteral('0x7f.1')).toEqual({ family: 4, address: '127.0.0.1' });
    expect(parseHostLiteral('[::1]')).toEqual({ family: 6, address: '::1' });
  });

  it('throws on hosts no URL accepts', () => {
    expect(() => parseHostLiteral('0x1ffffffff')).toThrow(TypeError);
    expect(() => parseHostLiteral('256.0.0.1')).toThrow(TypeError);
  });
});

describe('rememberedByText', () => {
  it('asks once per text, holds at most `kept` answers, and never remembers a throw', () => {
    const asked: string[] = [];
    const upper = rememberedByText((text) => {
      asked.push(text);
      if (text === 'bad') throw new TypeError('bad');
      return text === 'none' ? undefined : text.toUpperCase();
    }, 2);
    expect([upper('a'), upper('a'), upper('none'), upper('none')]).toEqual(['A', 'A', undefined, undefined]);
    expect(asked).toEqual(['a', 'none']);
    expect(() => upper('bad')).toThrow(TypeError);
    expect(() => upper('bad')).toThrow(TypeError);
    expect(asked).toEqual(['a', 'none', 'bad', 'bad']);
    // Full at two: the third text drops the least recently used ('a'), so 'a' is asked again.
    expect([upper('b'), upper('a')]).toEqual(['B', 'A']);
    expect(asked.slice(4)).toEqual(['b', 'a']);
  });
});
