import { classifyAddress, parseHostLiteral } from './addresses.js';
import { type ApiError, validationError } from '../errors.js';

/**
 * The checks an outbound URL (a webhook receiver, a grant provider) passes when it is registered:
 * no credentials in it, and a literal address must be public (loopback too when the
 * installation allows it). A host name is resolved and checked at each request by the
 * `EgressClient`, which pins the connection to the checked address. Returns the normalized URL.
 */
export function checkEgressUrl(raw: string, allowLoopback: boolean, path = '/url'): string {
  const url = new URL(raw);
  if (url.username || url.password) throw invalidUrl(path, 'must not contain credentials');
  const literal = parseHostLiteral(url.host);
  if (literal) {
    const cls = classifyAddress(literal.address);
    if (cls !== 'public' && !(allowLoopback && cls === 'loopback')) throw invalidUrl(path, `the address is not public (${cls})`);
  }
  return url.toString();
}

function invalidUrl(path: string, message: string): ApiError {
  return validationError('body', path, `url ${message}`, 'invalid_url');
}
