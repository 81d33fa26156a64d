/**
 * llama.cpp (node-llama-cpp 3.21.1, CPU build) as the rollout engine of a tfjs Llama policy:
 * sampled tokens come with the engine's log-probs of the distribution it sampled from
 * (temperature, top-p as llama.cpp's sampler chain applies them: nucleus on the temperature-1
 * probabilities, then the temperature); a weight sync makes the engine compute the new
 * policy's log-probs; and in GRPO with an injected mismatch (the engine samples at another
 * temperature than the trainer scores at) the measured KL, the importance weights and their
 * effective sample size are the formulas on the engine's and the trainer's log-probs.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import * as tf from '@tensorflow/tfjs';

import { ArithmeticEnvironment, MAX_TURNS, MAX_TURN_TOKENS } from '../app/demo/environment.js';
import { ProblemSplits, type Problem } from '../app/demo/problems.js';
import { TOKEN, VOCAB, VOCAB_SIZE, decode, encode } from '../app/demo/vocab.js';
import { LlamaCppEngine } from '../lib/chat_client/llama_cpp.js';
import { Role } from '../lib/kernels/index.js';
import { EnginePolicy } from '../lib/training/engine_policy.js';
import { GRPOTrainer, type Episode } from '../lib/training/index.js';
import { LlamaModel } from '../lib/training/llama.js';
import { SeededRandom } from '../lib/training/random.js';
import { TfjsPolicy } from '../lib/training/tfjs_policy.js';

let engineAvailable = true;
try {
  await import('node-llama-cpp' as string);
} catch {
  engineAvailable = false;
}

const vocabulary = { tokens: VOCAB, bos: TOKEN.bos, eos: TOKEN.ansEnd, pad: TOKEN.pad };

function llama(seed: number): LlamaModel {
  const rng = new SeededRandom(seed);
  return new LlamaModel({ vocabSize: VOCAB_SIZE, dModel: 32, layers: 1, heads: 2, ffnHidden: 64, contextLength: 160 }, () => rng.next());
}

function trainerOf(model: LlamaModel): TfjsPolicy {
  return new TfjsPolicy({
    model: (tokens) => model.logits(tokens),
    variables: model.variables,
    optimizer: tf.train.adam(1e-2),
    tokenizer: { encode: (text, role) => Int32Array.from(role === 'prompt' ? [TOKEN.bos, ...encode(text)] : encode(text)), decode },
    stopTokens: [TOKEN.calcEnd, TOKEN.ansEnd],
    padToken: TOKEN.pad,
  });
}

/** The tfjs forward's logits after each prefix, float64 rows. */
function logitsOf(model: LlamaModel, tokens: readonly number[]): Float64Array[] {
  const values = tf.tidy(() => model.logits(tf.tensor2d([...tokens], [1, tokens.length], 'int32')).dataSync());
  return tokens.map((_, t) => Float64Array.from(values.subarray(t * VOCAB_SIZE, (t + 1) * VOCAB_SIZE)));
}

function logSoftmax(z: readonly number[]): number[] {
  const max = Math.max(...z);
  const log = Math.log(z.reduce((a, v) => a + Math.exp(v - max), 0)) + max;
  return z.map((v) => v - log);
}

describe('llama.cpp rollout engine', { skip: engineAvailable ? false : 'node-llama-cpp is not installed' }, () => {
  let dir = '';
  before(async () => {
    await tf.setBackend('cpu');
    dir = await mkdtemp(join(tmpdir(), 'tirl-engine-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const save = async (model: LlamaModel, name: string) => {
    const path = join(dir, name);
    await writeFile(path, await model.toGguf(vocabulary));
    return path;
  };

  it('samples several sequences at once with the log-probs of its temperature and nucleus', async () => {
    const model = llama(5);
    const engine = await LlamaCppEngine.open({ modelPath: await save(model, 'sample.gguf'), sequences: 4, contextSize: 64 });
    try {
      const prompt = [TOKEN.bos, ...encode('what is 12 times 7 ?')];
      for (const { temperature, topP } of [{ temperature: 1, topP: 1 }, { temperature: 0.7, topP: 1 }, { temperature: 1.3, topP: 0.8 }]) {
        const completion = await engine.complete({ promptTokenIds: prompt, maxTokens: 12, temperature, topP, n: 6, seed: 9 });
        assert.equal(completion.samples.length, 6);
        assert.equal(completion.weightVersion, '0');
        let checked = 0;
        for (const sample of completion.samples) {
          assert.equal(sample.tokenIds.length, 12);
          const rows = logitsOf(model, [...prompt, ...sample.tokenIds]);
          sample.tokenIds.forEach((token, k) => {
            const z = [...rows[prompt.length - 1 + k]!];
            // llama.cpp's chain: the nucleus of the temperature-1 distribution, then softmax(z / T) over it.
            const p1 = logSoftmax(z).map(Math.exp);
            const order = z.map((_, v) => v).sort((a, b) => p1[b]! - p1[a]!);
            const nucleus = new Set<number>();
            let mass = 0;
            for (const v of order) {
              nucleus.add(v);
              mass += p1[v]!;
              if (mass >= topP) break;
            }
            assert.ok(nucleus.has(token), `token ${token} outside the top-p ${topP} nucleus`);
            const kept = [...nucleus];
            const logp = logSoftmax(kept.map((v) => z[v]! / temperature))[kept.indexOf(token)]!;
            assert.ok(Math.abs(sample.logprobs[k]! - logp) < 1e-4, `T ${temperature} top-p ${topP} step ${k}: ${sample.logprobs[k]} vs ${logp}`);
            checked++;
          });
        }
        assert.equal(checked, 72);
        const distinct = new Set(completion.samples.map((s) => s.tokenIds.join(',')));
        assert.ok(distinct.size > 1, 'the six samples should differ');
      }
      await assert.rejects(engine.complete({ promptTokenIds: [], maxTokens: 4 }), { name: 'RangeError', message: /request\.promptTokenIds/ });
      await assert.rejects(engine.complete({ promptTokenIds: prompt, maxTokens: 4, topP: 1.5 }), { name: 'RangeError', message: /request\.topP/ });
    } finally {
      await engine.close();
      model.dispose();
    }
  });

  it('after a weight sync computes the new policy\'s log-probs, and reports the new version', async () => {
    const first = llama(6);
    const second = llama(7);
    const engine = await LlamaCppEngine.open({ modelPath: await save(first, 'v0.gguf'), sequences: 2, contextSize: 64 });
    try {
      const tokens = [TOKEN.bos, ...encode('a box holds 12 items . how many items in 3 boxes ?')];
      const diff = (rows: Float64Array[], model: LlamaModel) => {
        const want = logitsOf(model, tokens).map((z) => logSoftmax([...z]));
        return Math.max(...rows.map((row, t) => Math.max(...[...row].map((v, k) => Math.abs(v - want[t]![k]!)))));
      };
      const old = await engine.nextTokenLogprobs(tokens, VOCAB_SIZE);
      assert.ok(diff(old, first) < 2e-5, `before the sync ${diff(old, first)}`);
      const { seconds } = await engine.loadWeights(await save(second, 'v1.gguf'), 1);
      assert.ok(seconds >= 0);
      assert.equal(engine.weightVersion, 1);
      const synced = await engine.nextTokenLogprobs(tokens, VOCAB_SIZE);
      assert.ok(diff(synced, second) < 2e-5, `after the sync ${diff(synced, second)}`);
      assert.ok(diff(synced, first) > 1e-2, 'the old weights should no longer be served');
      assert.equal((await engine.complete({ promptTokenIds: tokens, maxTokens: 2, seed: 1 })).weightVersion, '1');
    } finally {
      await engine.close();
      first.dispose();
      second.dispose();
    }
  });

  it('GRPO on its rollouts: an injected temperature mismatch gives the KL, weights and ESS of the formulas; staleness is measured', async () => {
    const model = llama(8);
    const engine = await LlamaCppEngine.open({ modelPath: await save(model, 'grpo.gguf'), sequences: 8, contextSize: 160 });
    const trainer = trainerOf(model);
    try {
      const run = async (temperature: number, steps: number) => {
        const policy = new EnginePolicy({ trainer, engine, decode, stopTokenIds: [TOKEN.calcEnd, TOKEN.ansEnd], temperature });
        const splits = new ProblemSplits(3, { testSize: 4, validationSize: 4 });
        const expected: { rollout: number[]; trainer: number[] }[] = [];
        const grpo = new GRPOTrainer<Problem>({
          policy, createEnvironment: () => new ArithmeticEnvironment(),
          problems: () => [splits.nextTrain(), splits.nextTrain()],
          groupSize: 4, maxTurns: MAX_TURNS, maxTurnTokens: MAX_TURN_TOKENS, maxTokens: 128, seed: 4, filters: [], maxGradNorm: Infinity,
          rolloutCorrection: { rolloutIs: 'token', rolloutIsThreshold: 2 },
          onEpisodes: async (episodes: readonly Episode<Problem>[]) => {
            const rollout: number[] = [];
            const scored: number[] = [];
            for (const e of episodes) {
              const { logp } = await trainer.logprobs({ tokens: e.tokens, seqOffsets: Int32Array.of(0, e.tokens.length) });
              e.roles.forEach((role, t) => {
                if (role !== Role.action) return;
                rollout.push(e.behaviourLogp[t]!);
                scored.push(logp[t]!);
              });
            }
            expected.push({ rollout, trainer: scored });
          },
        });
        return { metrics: await grpo.train(steps), expected };
      };

      const same = await run(1, 1);
      const c0 = same.metrics[0]!.rolloutCorrection!;
      assert.ok(Math.abs(c0.kl) < 1e-5 && c0.maxAbsLogpDiff < 1e-4, `same weights, same temperature: kl ${c0.kl}, max |d| ${c0.maxAbsLogpDiff}`);

      // Two steps without a weight sync: the second step's rollouts are one version stale.
      const hot = await run(1.6, 2);
      for (const [step, m] of hot.metrics.entries()) {
        const { rollout, trainer: scored } = hot.expected[step]!;
        const d = scored.map((value, t) => value - rollout[t]!);
        const weights = d.map((value) => Math.min(Math.exp(value), 2));
        const meanOf = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
        const kl = meanOf(d.map((value) => -value));
        const meanWeight = meanOf(weights);
        const ess = 1 / meanOf(weights.map((w) => (w / (meanWeight + 1e-8)) ** 2));
        const c = m.rolloutCorrection!;
        assert.equal(c.tokens, d.length);
        assert.ok(Math.abs(c.kl - kl) < 1e-5, `step ${step + 1}: kl ${c.kl} vs ${kl}`);
        assert.ok(Math.abs(c.meanWeight! - meanWeight) < 1e-5, `mean weight ${c.meanWeight} vs ${meanWeight}`);
        assert.ok(Math.abs(c.effectiveSampleSize! - ess) < 1e-5, `ess ${c.effectiveSampleSize} vs ${ess}`);
        assert.ok(Math.abs(c.maxAbsLogpDiff - Math.max(...d.map(Math.abs))) < 1e-6);
        assert.ok(kl > 1e-3, `the temperature mismatch should show: kl ${kl}`);
        assert.ok(c.effectiveSampleSize! < 1);
        assert.deepEqual(m.staleness, { mean: step, max: step });
      }
    } finally {
      await engine.close();
      trainer.dispose();
      model.dispose();
    }
  });
});
