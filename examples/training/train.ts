/**
 * Trains the scripted product task with GRPO end to end in seconds:
 * `node dist/examples/training/train.js [--steps 30] [--log out/metrics.jsonl]`.
 * The policy learns to call the calculator, then answer with its result; void turns
 * (thinking aloud) are filtered out of the loss, and THOR resamples failed code.
 */
import { parseArgs } from 'node:util';

import * as tf from '@tensorflow/tfjs';

import { GRPOTrainer } from '../../lib/training/index.js';
import { createBigramPolicy, ProductEnvironment, products } from './arithmetic.js';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '30' },
    seed: { type: 'string', default: '1' },
    log: { type: 'string' },
  },
});

tf.enableProdMode(); // quiet: no tfjs-node advertisement
await tf.setBackend('cpu');
const policy = createBigramPolicy();
const trainer = new GRPOTrainer({
  policy,
  createEnvironment: () => new ProductEnvironment(),
  problems: products(256, Number(values.seed)),
  promptsPerStep: 4,
  groupSize: 8,
  maxTurns: 4,
  maxTurnTokens: 1,
  stepLevel: { samples: 2, coef: 0.5 },
  seed: Number(values.seed),
  ...(values.log ? { logFile: values.log } : {}),
  onStep: (m) => {
    const voided = m.filtered['void-turn']?.trajectories ?? 0;
    console.log(
      `step ${String(m.step).padStart(3)}  success ${m.successRate.toFixed(2)}  reward ${m.reward.toFixed(2)}  ` +
        `void ${String(voided).padStart(2)}/${m.episodes}  clip ${m.clipFraction.toFixed(3)}  ` +
        `entropy ${m.entropy.toFixed(3)}  |g| ${m.gradNorm.toFixed(3)}  ${Math.round(m.tokensPerSecond)} tok/s`,
    );
  },
});
const started = performance.now();
const metrics = await trainer.train(Number(values.steps));
await trainer.close();
const first = metrics.slice(0, 3).reduce((s, m) => s + m.successRate, 0) / Math.min(3, metrics.length);
const last = metrics.slice(-3).reduce((s, m) => s + m.successRate, 0) / Math.min(3, metrics.length);
console.log(
  `success rate ${first.toFixed(2)} -> ${last.toFixed(2)} in ${metrics.length} steps, ` +
    `${((performance.now() - started) / 1000).toFixed(1)} s`,
);
