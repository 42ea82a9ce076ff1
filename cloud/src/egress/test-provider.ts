/**
 * A grant provider stand-in for test files (vitest only: it registers hooks): a test PKI and a
 * real HTTPS receiver whose answer each test sets.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll } from 'vitest';
import { createTestPki, startHttpsReceiver, type ReceiverHandler, type TestPki, type TestReceiver } from './test-https.js';

/** A grant provider stand-in for one test file (or describe block): see `useProviderStandIn`. */
export interface ProviderStandIn {
  /** The PKI its certificate comes from (`caFile`/`caPem` for the egress client under test). */
  readonly pki: TestPki;
  /** The HTTPS receiver on 127.0.0.1 (its certificate names localhost and 127.0.0.1). */
  readonly provider: TestReceiver;
  /** How it answers each request; a test sets its own. Unset: the request is left unanswered. */
  answer: ReceiverHandler;
}

/**
 * Registers the hooks that start a test PKI and an HTTPS provider stand-in before the tests of the
 * file (or the describe block it is called in) and stop both after them. Read `pki` and `provider`
 * inside tests and hooks, not at the top level (they exist once `beforeAll` has run).
 */
export function useProviderStandIn(): ProviderStandIn {
  let pki: TestPki | undefined;
  let provider: TestReceiver | undefined;
  const stand: ProviderStandIn = {
    get pki() {
      if (!pki) throw new Error('the provider stand-in starts in beforeAll');
      return pki;
    },
    get provider() {
      if (!provider) throw new Error('the provider stand-in starts in beforeAll');
      return provider;
    },
    answer: () => undefined,
  };
  beforeAll(async () => {
    pki = createTestPki();
    provider = await startHttpsReceiver(pki.issue(['localhost'], ['127.0.0.1']), (req, res, ctx) => stand.answer(req, res, ctx));
  });
  afterAll(async () => {
    await provider?.close();
    pki?.cleanup();
  });
  return stand;
}

/** Answers `body` as JSON (a string is sent as it is: a malformed answer). */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
}
