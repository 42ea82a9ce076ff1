import canonicalize from 'canonicalize';
import { describe, expect, it } from 'vitest';
import { requestFingerprint } from './idempotency.js';

/**
 * Fingerprints stored under Idempotency-Keys before the fingerprint used `canonicalize`
 * (computed by the hand-written sorted-keys serializer it replaced): a retry begun before an
 * upgrade must match after it. Each body is the request text, parsed as the body parser does.
 */
const STORED: readonly (readonly [body: string, fingerprint: string])[] = [
  ["null", "e3ec6f1f17d3107b437e25fe1fa08d91f721945ce132cb807f0f00b383688c9f"],
  ["{\"name\":\"idem\",\"scopes\":[\"data:read\"]}", "ce3222008c2b1bd31c3a76f84f30f394e515e4b99a81b4ff49cdf1f69e2bf353"],
  ["{\"scopes\":[\"data:read\"],\"name\":\"idem\"}", "ce3222008c2b1bd31c3a76f84f30f394e515e4b99a81b4ff49cdf1f69e2bf353"],
  ["{\"b\":{\"z\":1,\"a\":[3,{\"y\":null,\"x\":true}]},\"a\":\"\u00e9\ud83d\ude00\\u0001\\\"\\\\/\\n\"}", "8a8f28fe887586c8d461858fd7503c354e297ee51b73da19622919ee74aded4b"],
  ["{\"n\":[0,-0,1.0,1e21,1e-7,0.1,123456789012345678901234567890,5e-324,1.7976931348623157e308,-1.5E+3,100]}", "ed42c9c9bda3f2b3983320bdb93b93470d6337779a3a329cd4dbdfc45ac97c4e"],
  ["{\"10\":1,\"2\":2,\"B\":3,\"a\":4,\"\u00e9\":5,\"\ud83d\ude00\":6,\"\\uffff\":7}", "860f9b055a98b927305ed1010745604502c2676a1124d115a42bbc6807c3299b"],
  ["\"text\"", "32476c09e16f629edc712fdc3b5c02f9950951a28f5cd13137dcb518503d0c35"],
  ["42", "a2b47ac65ea6d2aee68ee9910fe26d4ec0fe005bab66bccff4cf083dc42b160e"],
  ["[]", "044a59264e3a11a7d465a4b719aa3fad13974b088736473762bfa5709a5d2340"],
  ["{}", "0be22b8d06909572c3209ed89e50c6bd4e7dc1543d08d859b11294b266682bae"],
  ["[[],{},\"\"]", "79eae50822919a4049d5335e0bc18f0f86c7b68b3c101aef535d56c6ac2a81ac"],
  ["{\"big\":1e400,\"neg\":-1e400}", "6e54fbf923653550d030cc86eb9842d9b915c11f5479679c648ccdad77d60173"],
  ["{\"lone\":\"\\ud800\",\"pair\":\"\\ud83d\\ude00\"}", "b7cb05bcbdac68f27e3b2a2f8a42e6b7ba458b434acda867b2f57317af80919e"],
  ["{\"\\udc00\":1}", "99da8f850209413a498726db686426454cd8e4d46103da4326db5aee1b98790d"],
];

/** Bodies JSON.parse accepts but RFC 8785 refuses (not I-JSON): they keep their former form. */
const NOT_I_JSON = ['{"big":1e400,"neg":-1e400}', '{"lone":"\\ud800","pair":"\\ud83d\\ude00"}', '{"\\udc00":1}'];

describe('requestFingerprint', () => {
  it.each(STORED)('is unchanged for %s', (body, fingerprint) => {
    expect(requestFingerprint('POST', '/v1/x?y=1', JSON.parse(body))).toBe(fingerprint);
  });

  it('hashes no body (absent, or JSON null) as the empty text', () => {
    const empty = 'c583ce382440c30a7e7346a7ed7cf9cb11f3d05c05e80254678885d4beed48e9';
    expect(requestFingerprint('POST', '/v1/x', undefined)).toBe(empty);
    expect(requestFingerprint('POST', '/v1/x', null)).toBe(empty);
  });

  it('keeps the former form for the bodies canonicalize refuses', () => {
    for (const body of NOT_I_JSON) {
      expect(() => canonicalize(JSON.parse(body))).toThrow();
      expect(STORED.map(([b]) => b)).toContain(body);
    }
  });

  it('ignores key order and tells different bodies apart', () => {
    const a = requestFingerprint('POST', '/v1/api-keys', { name: 'k', scopes: ['a', 'b'] });
    expect(requestFingerprint('POST', '/v1/api-keys', { scopes: ['a', 'b'], name: 'k' })).toBe(a);
    expect(requestFingerprint('POST', '/v1/api-keys', { name: 'k', scopes: ['b', 'a'] })).not.toBe(a);
    expect(requestFingerprint('POST', '/v1/api-keys?x=1', { name: 'k', scopes: ['a', 'b'] })).not.toBe(a);
  });
});
