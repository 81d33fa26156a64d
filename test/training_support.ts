/** Helpers shared by the training tests: bigram policies with unique names, a recording policy. */
import * as tf from '@tensorflow/tfjs';

import type { Policy, PolicyBatch, PolicyOutputGradient } from '../lib/training/index.js';
import type { TfjsPolicy } from '../lib/training/tfjs.js';
import { createBigramPolicy } from '../examples/training/arithmetic.js';

let policyCount = 0;

/** A fresh bigram policy with a unique variable name; SGD at rate 1 makes an update equal minus the gradient. */
export function bigram(optimizer: 'sgd' | 'adam' = 'sgd'): TfjsPolicy {
  policyCount += 1;
  return createBigramPolicy({
    name: `training-test-${policyCount}`,
    optimizer: optimizer === 'sgd' ? tf.train.sgd(1) : tf.train.adam(0.1),
  });
}

/** The bigram table's current values. */
export function table(policy: TfjsPolicy): Float32Array {
  return (policy as unknown as { options: { variables: tf.Variable[] } }).options.variables[0].dataSync().slice() as Float32Array;
}

/** Wraps a policy and records every gradient a trainer hands back for a batch. */
export class RecordingPolicy implements Policy {
  readonly gradients: { batch: PolicyBatch; gradient: PolicyOutputGradient }[] = [];
  constructor(readonly inner: Policy) {}
  encode(text: string, role: 'prompt' | 'feedback') {
    return this.inner.encode(text, role);
  }
  sampleTurns(...args: Parameters<Policy['sampleTurns']>) {
    return this.inner.sampleTurns(...args);
  }
  logprobs(...args: Parameters<Policy['logprobs']>) {
    return this.inner.logprobs(...args);
  }
  accumulateGradients(...[batch, lossGradient, options]: Parameters<Policy['accumulateGradients']>) {
    return this.inner.accumulateGradients(
      batch,
      (outputs) => {
        const gradient = lossGradient(outputs);
        this.gradients.push({ batch, gradient });
        return gradient;
      },
      options,
    );
  }
  applyGradients(...args: Parameters<Policy['applyGradients']>) {
    return this.inner.applyGradients(...args);
  }
  frozenCopy() {
    return this.inner.frozenCopy();
  }
  saveState(dir: string) {
    return this.inner.saveState(dir);
  }
  loadState(dir: string) {
    return this.inner.loadState(dir);
  }
}
