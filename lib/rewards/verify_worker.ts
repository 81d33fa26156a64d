/**
 * Worker of `verifyAnswers`: verifies chunks of (response, gold) pairs. Before each item it
 * writes the item's index and start time into the shared watchdog slots, so the parent can
 * tell which item overran and terminate this worker.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { resolveVerifyOptions, verifyResolved, type AnswerVerdict, type VerifyOptions } from './math.js';
import { loadLatexParser } from './mathjson.js';

interface ChunkMessage {
  start: number;
  responses: unknown[];
  golds: unknown[];
}

const { options, watch } = workerData as { options: VerifyOptions; watch: SharedArrayBuffer };
const resolved = resolveVerifyOptions(options);
loadLatexParser();
const index = new Int32Array(watch, 0, 1);
const startedAt = new Float64Array(watch, 8, 1);

parentPort!.on('message', (chunk: ChunkMessage) => {
  const verdicts: AnswerVerdict[] = [];
  for (let k = 0; k < chunk.responses.length; k++) {
    Atomics.store(index, 0, chunk.start + k);
    startedAt[0] = performance.timeOrigin + performance.now();
    verdicts.push(verifyResolved(chunk.responses[k], chunk.golds[k], resolved));
  }
  startedAt[0] = 0;
  parentPort!.postMessage({ start: chunk.start, verdicts });
});
