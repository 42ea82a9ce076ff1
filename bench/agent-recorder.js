/* global process, setInterval, clearInterval */
// The recorder program of `npm run bench -- agent` (bench/agent.ts), started by the agent's
// `command` recorder once per episode: `node agent-recorder.js FILE BYTES_PER_SECOND CHUNK_MS`.
// It appends incompressible bytes (one random block, as compressed camera frames are) to FILE at
// BYTES_PER_SECOND, one write every CHUNK_MS, catching up after a late tick so the rate holds on a
// busy machine, and on SIGINT closes the file and exits 0, as `ros2 bag record` does. It stands in
// for the robot's recorder: the bench measures the agent around it, and this program's own RSS
// and CPU are printed apart.
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

const [file, rateArg = '65536', chunkArg = '100'] = process.argv.slice(2);
const rate = Number(rateArg);
const chunkMs = Number(chunkArg);
if (!file || !(Number.isInteger(rate) && rate > 0) || !(Number.isInteger(chunkMs) && chunkMs > 0)) {
  process.stderr.write('usage: agent-recorder.js FILE BYTES_PER_SECOND CHUNK_MS (whole numbers > 0)\n');
  process.exit(2);
}

const fd = openSync(file, 'wx');
const block = randomBytes(Math.max(1, Math.ceil((rate * chunkMs) / 1000)));
const t0 = performance.now();
let written = 0;

const timer = setInterval(() => {
  const due = Math.floor(((performance.now() - t0) / 1000) * rate);
  while (written < due) {
    const n = Math.min(block.length, due - written);
    writeSync(fd, block, 0, n);
    written += n;
  }
}, chunkMs);

process.once('SIGINT', () => {
  clearInterval(timer);
  fsyncSync(fd);
  closeSync(fd);
  process.stderr.write(`agent-recorder: wrote ${written} bytes to ${file}\n`);
  process.exit(0);
});
