/* global process, Buffer */
// A webhook receiver in one file, no dependencies: an HTTPS server that checks the
// X-Service-Signature of each delivery and prints one JSON line per delivery on stdout.
//
//   WEBHOOK_SECRET=whsec_… node docs/examples/webhook-receiver.js --port 8444 \
//     --cert tls/cert.pem --key tls/key.pem
//
// The same check verifies the grant requests a grant provider receives (with the
// destination's dsec_ secret instead). See docs/api.md, "Verifying a signature".
import { createHmac, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';
import { parseArgs } from 'node:util';

const { values: opts } = parseArgs({
  options: {
    port: { type: 'string', default: process.env.WEBHOOK_PORT ?? '8444' },
    host: { type: 'string', default: '127.0.0.1' },
    cert: { type: 'string', default: 'tls/cert.pem' },
    key: { type: 'string', default: 'tls/key.pem' },
  },
});
const secret = process.env.WEBHOOK_SECRET;
if (!secret) {
  process.stderr.write('webhook-receiver: set WEBHOOK_SECRET to the whsec_ secret of the subscription\n');
  process.exit(2);
}
// During a rotation, the old secret (WEBHOOK_PREVIOUS_SECRET) still verifies for 24 hours.
const secrets = [secret, process.env.WEBHOOK_PREVIOUS_SECRET].filter(Boolean);

/** Accepts signatures at most this far from our clock (replays of old deliveries fail). */
const TOLERANCE_S = 300;

/**
 * `X-Service-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]`: each v1 is the HMAC-SHA256,
 * keyed with the secret, of `<t>.<raw body>`. Any v1 may match any of our secrets.
 */
function verify(rawBody, header, secretList, nowS = Math.floor(Date.now() / 1000)) {
  if (typeof header !== 'string') return 'missing signature';
  let t = null;
  const v1 = [];
  for (const part of header.split(',')) {
    const [k, v] = part.split('=', 2).map((s) => s?.trim());
    if (k === 't' && /^\d+$/.test(v ?? '')) t = Number(v);
    if (k === 'v1' && /^[0-9a-f]{64}$/.test(v ?? '')) v1.push(Buffer.from(v, 'hex'));
  }
  if (t === null || v1.length === 0) return 'malformed signature';
  if (Math.abs(nowS - t) > TOLERANCE_S) return 'stale signature';
  for (const s of secretList) {
    const expected = createHmac('sha256', s).update(`${t}.`).update(rawBody).digest();
    if (v1.some((got) => timingSafeEqual(got, expected))) return null;
  }
  return 'signature mismatch';
}

const seen = new Set();
const server = createServer({ cert: readFileSync(opts.cert), key: readFileSync(opts.key) }, (req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    // Verify the raw bytes as received: parsing and re-serializing would change them.
    const raw = Buffer.concat(chunks);
    const problem = verify(raw, req.headers['x-service-signature'], secrets);
    const eventId = req.headers['x-service-event-id'];
    const line = { verified: problem === null, event: req.headers['x-service-event'], event_id: eventId };
    if (problem !== null) {
      process.stdout.write(`${JSON.stringify({ ...line, problem })}\n`);
      res.writeHead(401).end();
      return;
    }
    // Deliveries are at least once: the event id says whether this one was seen already.
    const duplicate = seen.has(eventId);
    seen.add(eventId);
    process.stdout.write(`${JSON.stringify({ ...line, duplicate, payload: JSON.parse(raw.toString('utf8')) })}\n`);
    res.writeHead(204).end();
  });
});
server.listen(Number(opts.port), opts.host, () => {
  process.stderr.write(`webhook-receiver: listening on https://${opts.host}:${server.address().port}\n`);
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => server.close(() => process.exit(0)));
