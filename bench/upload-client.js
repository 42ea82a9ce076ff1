/* global process, console, setInterval, clearInterval, Buffer, AbortController */
// One upload of the upload benchmark (bench/upload.ts), in its own process so its memory is its
// own: `agent-put` and `agent-multipart` run the agent's real upload code (agent/dist/sync/
// transfer.js: putFile, multipartUpload, with the agent's dispatcher from trust.js); `undici-parts`
// is the baseline of N concurrent part PUTs with plain undici (parts read into buffers, nothing
// hashed, no receipts). Prints one JSON line: elapsed ms, bytes, peak RSS (sampled every 20 ms
// and the kernel's max RSS) and peak anonymous RSS (the process's own memory, without the mapped
// node binary), the growth of anonymous RSS over what the process held before the upload began,
// and the CPU seconds (user + system, every thread: the agent's hashing worker included) the
// upload took.
//
// Usage: node upload-client.js '<json options>'
import { readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import { request } from 'undici';
import { multipartUpload, partCount, putFile } from '../agent/dist/sync/transfer.js';
import { uploadDispatcher } from '../agent/dist/sync/trust.js';

const o = JSON.parse(process.argv[2] ?? '{}');
const { mode, url, file, size, sha256, partSize, parallel } = o;
// RSS counts the node binary and libraries mapped from disk (shared, the same for any node
// program); RssAnon is the process's own memory. Both are sampled; the kernel's max RSS is kept too.
const anonBytes = () => {
  const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
};
let peak = process.memoryUsage().rss;
let peakAnon = anonBytes();
/** Peak anonymous RSS from the start of the upload on (the sampler's ticks before it are start-up). */
let uploadPeakAnon = 0;
const sampler = setInterval(() => {
  peak = Math.max(peak, process.memoryUsage().rss);
  const anon = anonBytes();
  peakAnon = Math.max(peakAnon, anon);
  uploadPeakAnon = Math.max(uploadPeakAnon, anon);
}, 20);
// The agent sizes its pool as replicas × parts in parallel; one replica here.
const dispatcher = uploadDispatcher({ connections: Math.max(1, parallel) });
const http = { dispatcher, allowHttp: true, timeoutMs: 120_000 };
const signal = new AbortController().signal;
const count = partCount(size, partSize);
const partUrls = Array.from({ length: count }, (_, i) => `${url}/obj/bench?partNumber=${i + 1}&uploadId=u1`);

async function undiciParts() {
  const fh = await open(file, 'r');
  try {
    let next = 1;
    const worker = async () => {
      while (next <= count) {
        const n = next++;
        const start = (n - 1) * partSize;
        const length = Math.min(partSize, size - start);
        const buf = Buffer.allocUnsafe(length);
        let read = 0;
        while (read < length) {
          const { bytesRead } = await fh.read(buf, read, length - read, start + read);
          if (bytesRead === 0) throw new Error('short read');
          read += bytesRead;
        }
        const res = await request(partUrls[n - 1], { method: 'PUT', body: buf, headers: { 'content-length': String(length) }, dispatcher });
        await res.body.dump();
        if (res.statusCode !== 200) throw new Error(`part ${n} answered ${res.statusCode}`);
      }
    };
    await Promise.all(Array.from({ length: parallel }, worker));
  } finally {
    await fh.close();
  }
}

const anonBefore = anonBytes();
uploadPeakAnon = anonBefore;
const cpu0 = process.cpuUsage();
const t0 = performance.now();
if (mode === 'agent-put') {
  await putFile({ http, url: `${url}/obj/bench`, file, label: 'bench.bin', size, expectedSha256: sha256, signal, onFirstByte: () => undefined, onBytes: () => undefined });
} else if (mode === 'agent-multipart') {
  await multipartUpload({
    http,
    job: { file, label: 'bench.bin', size, expectedSha256: sha256, uploadId: 'u1', partSize, partUrls, completeUrl: `${url}/obj/bench?uploadId=u1`, done: new Map() },
    parallel,
    signal,
    onFirstByte: () => undefined,
    onPart: async () => undefined,
    onBytes: () => undefined,
  });
} else if (mode === 'undici-parts') {
  await undiciParts();
} else {
  throw new Error(`unknown mode ${mode}`);
}
const ms = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
clearInterval(sampler);
peak = Math.max(peak, process.memoryUsage().rss);
const anonAfter = anonBytes();
peakAnon = Math.max(peakAnon, anonAfter);
uploadPeakAnon = Math.max(uploadPeakAnon, anonAfter);
await dispatcher.close();
console.log(JSON.stringify({ mode, ms, bytes: size, peak_rss: peak, max_rss: process.resourceUsage().maxRSS * 1024, peak_anon: peakAnon, anon_growth: uploadPeakAnon - anonBefore, cpu_s: (cpu.user + cpu.system) / 1e6 }));
