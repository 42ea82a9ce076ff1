/* global process, console, Buffer */
// The upload benchmark's receiver (bench/upload.ts), in its own process: a plain HTTP server
// that reads every request body to the end and drops it, answers a PUT with an opaque ETag
// (not an MD5, so the agent takes it as "no proof" and does not compare) and a multipart
// complete POST with a CompleteMultipartUploadResult. It stores nothing and checks nothing, so
// what the benchmark measures is the sending side. GET /stats answers the PUT body bytes received.
// Prints {"url":"http://127.0.0.1:PORT"} once listening.
import { createServer } from 'node:http';

let bytes = 0;
let requests = 0;
const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/stats') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ bytes, requests }));
    return;
  }
  requests += 1;
  const put = req.method === 'PUT';
  req.on('data', (chunk) => {
    if (put) bytes += chunk.length;
  });
  req.on('end', () => {
    if (req.method === 'POST') {
      const body = '<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUploadResult><ETag>"bench-complete-1"</ETag></CompleteMultipartUploadResult>';
      res.writeHead(200, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    res.writeHead(200, { etag: `"bench-${requests}"`, 'content-length': 0 });
    res.end();
  });
});
server.keepAliveTimeout = 30_000;
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  console.log(JSON.stringify({ url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}` }));
});
process.on('SIGTERM', () => process.exit(0));
