import * as tf from '@tensorflow/tfjs';
import '@tensorflow/tfjs-backend-wasm';
import { GruLanguageModel } from './model.js';
import { Random } from './random.js';
import { VOCAB_SIZE, TOKEN, encode, decode } from './vocab.js';
import { ProblemSplits, type Problem } from './problems.js';
import { buildWarmStartData } from './tirgen.js';
import { packEpisodes } from './batch.js';
import { tokenLogprobs } from './logprobs.js';
import { rollout } from './rollout.js';
await tf.setBackend('wasm'); await tf.ready();
const rng = new Random(1);
const splits = new ProblemSplits(1);
const promptOf = (p: Problem) => [TOKEN.bos, ...encode(p.text)];
const t0 = performance.now();
const data = buildWarmStartData(() => splits.nextTrain(), promptOf, 4000, rng);
console.log('tirgen kept', data.episodes.length, 'of', data.proposed, 'ms', (performance.now() - t0).toFixed(0));
console.log(decode(data.episodes[0].tokens)); console.log(decode(data.episodes[1].tokens));
const model = new GruLanguageModel({ vocabSize: VOCAB_SIZE, hidden: Number(process.env.H ?? 64) }, rng);
const opt = tf.train.adam(Number(process.env.LR ?? 3e-3));
const B = 32;
const evaluate = (temperature: number) => {
  const eps = rollout(model, splits.test.slice(0, 100), promptOf, rng, { temperature });
  return { success: eps.reduce((s, e) => s + e.reward, 0) / eps.length, void: eps.filter(e => e.hasVoidTurn).length / eps.length, ex: decode(eps[0].tokens) };
};
let step = 0;
const t1 = performance.now();
for (let epochStep = 0; epochStep < Number(process.env.STEPS ?? 300); epochStep++) {
  const eps = Array.from({ length: B }, () => data.episodes[rng.int(0, data.episodes.length - 1)]);
  const pb = packEpisodes(eps);
  const maskT = tf.tensor1d(Float32Array.from(pb.mask));
  const count = pb.mask.reduce((a, b) => a + b, 0);
  const { value } = tf.tidy(() => {
    const r = tf.variableGrads(() => {
      const { logp } = tokenLogprobs(model.logits(pb.inputs, pb.batch, pb.steps), pb.labels);
      return tf.neg(tf.div(tf.sum(tf.mul(logp, maskT)), count)) as tf.Scalar;
    }, model.variables);
    opt.applyGradients(r.grads as any);
    return { value: r.value.dataSync()[0] };
  });
  maskT.dispose();
  step++;
  if (step % 50 === 0) {
    const g = evaluate(0), s = evaluate(1);
    console.log(`step ${step} loss ${value.toFixed(3)} greedy ${g.success.toFixed(2)} (void ${g.void.toFixed(2)}) sampled ${s.success.toFixed(2)} (void ${s.void.toFixed(2)}) ${((performance.now() - t1) / step).toFixed(0)} ms/step`);
    console.log('   ', s.ex);
  }
}
