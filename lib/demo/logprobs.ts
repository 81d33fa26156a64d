// TEMPORARY until the tfjs adapter (tirl/tfjs) lands: same signature, tfjs autodiff.
import * as tf from '@tensorflow/tfjs';
export function tokenLogprobs(logits: tf.Tensor2D, labels: Int32Array): { logp: tf.Tensor1D } {
  const v = logits.shape[1];
  const logp = tf.sum(tf.mul(tf.logSoftmax(logits), tf.oneHot(tf.tensor1d(labels, 'int32'), v).toFloat()), 1) as tf.Tensor1D;
  return { logp };
}
