import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { signPayload, verifySignature } from './signature.js';

/** An independent implementation: Python's hmac module, run as a separate process. */
function pythonMac(secret: string, t: number, body: string): string {
  const script = 'import hmac,hashlib,sys; print(hmac.new(sys.argv[1].encode(), (sys.argv[2] + "." + sys.argv[3]).encode(), hashlib.sha256).hexdigest())';
  return execFileSync('python3', ['-c', script, secret, String(t), body], { encoding: 'utf8' }).trim();
}

const SECRET = 'whsec_test_secret_value';
const OLD = 'whsec_previous_secret';
const BODY = '{"schema_version":1,"episode_id":"ep_1","state":"reported","note":"ünïcode ✓"}';
const T = 1_795_000_000;

describe('signature scheme (Stripe-compatible)', () => {
  it('produces the same HMAC as an independent implementation', () => {
    const header = signPayload(BODY, [SECRET], T);
    expect(header).toBe(`t=${T},v1=${pythonMac(SECRET, T, BODY)}`);
  });

  it('verifies what an independent implementation signed', () => {
    const header = `t=${T},v1=${pythonMac(SECRET, T, BODY)}`;
    expect(verifySignature({ body: BODY, header, secrets: [SECRET], nowS: T + 10 })).toEqual({ ok: true, timestamp: T });
  });

  it('signs with every secret during a rotation, and any v1 entry matches', () => {
    const header = signPayload(BODY, [SECRET, OLD], T);
    expect(header.split(',').filter((p) => p.startsWith('v1='))).toHaveLength(2);
    expect(verifySignature({ body: BODY, header, secrets: [OLD], nowS: T }).ok).toBe(true);
    expect(verifySignature({ body: BODY, header, secrets: [SECRET], nowS: T }).ok).toBe(true);
    expect(verifySignature({ body: BODY, header, secrets: ['whsec_other'], nowS: T })).toEqual({ ok: false, reason: 'mismatch' });
  });

  it('refuses a changed body, a changed timestamp and a stale one', () => {
    const header = signPayload(BODY, [SECRET], T);
    expect(verifySignature({ body: `${BODY} `, header, secrets: [SECRET], nowS: T }).ok).toBe(false);
    expect(verifySignature({ body: BODY, header: header.replace(`t=${T}`, `t=${T + 1}`), secrets: [SECRET], nowS: T })).toEqual({
      ok: false,
      reason: 'mismatch',
    });
    expect(verifySignature({ body: BODY, header, secrets: [SECRET], nowS: T + 301 })).toEqual({ ok: false, reason: 'stale' });
    expect(verifySignature({ body: BODY, header, secrets: [SECRET], nowS: T - 301 })).toEqual({ ok: false, reason: 'stale' });
    expect(verifySignature({ body: BODY, header, secrets: [SECRET], nowS: T + 300 }).ok).toBe(true);
  });

  it('refuses malformed headers', () => {
    for (const header of [undefined, '', 'v1=abc', `t=${T}`, `t=x,v1=${'a'.repeat(64)}`, `t=${T},v1=zz`, `t=${T},v0=${'a'.repeat(64)}`]) {
      expect(verifySignature({ body: BODY, header, secrets: [SECRET], nowS: T }), String(header)).toEqual({ ok: false, reason: 'malformed' });
    }
  });

  it('checks the raw bytes, not a re-serialization', () => {
    const raw = Buffer.from('{"a": 1,  "b":2}');
    const header = signPayload(raw, [SECRET], T);
    expect(verifySignature({ body: raw, header, secrets: [SECRET], nowS: T }).ok).toBe(true);
    expect(verifySignature({ body: JSON.stringify(JSON.parse(raw.toString())), header, secrets: [SECRET], nowS: T }).ok).toBe(false);
  });
});
