/**
 * DPO (sigmoid variant, with label smoothing) in plain TypeScript, single-threaded: one
 * pass computing the mean loss, its gradients, the implicit rewards and their accuracy,
 * with the stable log-sigmoid of MATH.md.
 */
export function dpoLossTs(
  policyChosen: Float32Array,
  policyRejected: Float32Array,
  refChosen: Float32Array,
  refRejected: Float32Array,
  beta: number,
  labelSmoothing: number,
  gradChosen: Float32Array,
  gradRejected: Float32Array,
  chosenRewards: Float32Array,
  rejectedRewards: Float32Array,
): { loss: number; rewardAccuracy: number } {
  const n = policyChosen.length;
  const scale = n > 0 ? 1 / n : 0;
  let lossSum = 0;
  let correct = 0;
  for (let i = 0; i < n; i++) {
    const chosen = beta * (policyChosen[i] - refChosen[i]);
    const rejected = beta * (policyRejected[i] - refRejected[i]);
    const z = chosen - rejected; // β·Δ
    const tail = Math.log1p(Math.exp(-Math.abs(z)));
    const logSigmoid = Math.min(z, 0) - tail;
    const logSigmoidNeg = Math.min(-z, 0) - tail;
    lossSum -= (1 - labelSmoothing) * logSigmoid + labelSmoothing * logSigmoidNeg;
    const sigmoid = Math.exp(logSigmoid);
    const dz = (-(1 - labelSmoothing) * (1 - sigmoid) + labelSmoothing * sigmoid) * beta * scale;
    gradChosen[i] = dz;
    gradRejected[i] = -dz;
    chosenRewards[i] = chosen;
    rejectedRewards[i] = rejected;
    if (chosen > rejected) correct++;
  }
  return { loss: lossSum * scale, rewardAccuracy: correct * scale };
}
