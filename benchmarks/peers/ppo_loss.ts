/**
 * ppoLoss in plain TypeScript, single-threaded: the count of masked tokens (the token-mean
 * normalizer), then one fused pass computing the clipped surrogate (with dual clip), the
 * optional k3 KL term, the statistics and dLoss/dlogp. Same math as MATH.md; float64
 * arithmetic, as JavaScript numbers are.
 */
export interface PpoLossTsResult {
  loss: number;
  clipFraction: number;
  clipFractionLower: number;
  approxKl: number;
}

export function ppoLossTs(
  logp: Float32Array,
  oldLogp: Float32Array,
  advantages: Float32Array,
  mask: Uint8Array,
  refLogp: Float32Array | undefined,
  clipLow: number,
  clipHigh: number,
  dualClip: number, // 0 = off
  klCoef: number,
  grad: Float32Array,
): PpoLossTsResult {
  const n = logp.length;
  let count = 0;
  for (let i = 0; i < n; i++) count += mask[i];
  const scale = count > 0 ? 1 / count : 0;
  const low = 1 - clipLow;
  const high = 1 + clipHigh;
  let pgSum = 0;
  let klSum = 0;
  let clipped = 0;
  let clippedLower = 0;
  let negKlSum = 0;
  for (let i = 0; i < n; i++) {
    if (mask[i] === 0) {
      grad[i] = 0;
      continue;
    }
    const a = advantages[i];
    const raw = logp[i] - oldLogp[i];
    const d = raw < -20 ? -20 : raw > 20 ? 20 : raw;
    const r = Math.exp(d);
    const l1 = -a * r;
    const l2 = -a * (r < low ? low : r > high ? high : r);
    let loss: number;
    let g: number;
    if (l2 > l1) {
      clipped++;
      loss = l2;
      g = 0; // l2 exceeds l1 only where the ratio is clipped: no gradient
    } else {
      loss = l1;
      g = raw === d ? -a * r : 0;
    }
    if (dualClip > 0 && a < 0) {
      const l3 = -a * dualClip;
      if (loss > l3) {
        clippedLower++;
        loss = l3;
        g = 0;
      }
    }
    pgSum += loss;
    negKlSum -= d;
    if (refLogp !== undefined) {
      const x = logp[i] - refLogp[i];
      const xc = x < -20 ? -20 : x > 20 ? 20 : x;
      const e = Math.exp(-xc);
      const k = e + xc - 1; // >= 0, so only the upper clamp at 10 can act
      if (k > 10) {
        klSum += 10;
      } else {
        klSum += k;
        if (x === xc) g += klCoef * (1 - e);
      }
    }
    grad[i] = g * scale;
  }
  return {
    loss: (pgSum + klCoef * klSum) * scale,
    clipFraction: clipped * scale,
    clipFractionLower: clippedLower * scale,
    approxKl: negKlSum * scale,
  };
}
