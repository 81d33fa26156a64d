/**
 * Independent float64 reference of groupAdvantages, straight from MATH.md (verl's convention
 * for groups of one), shared by the op test, the fuzzer and `tirl bench`.
 */
export function reference(rewards: Float32Array, groupIds: ArrayLike<number>, scaleByStd = true, epsilon = 1e-6): Float64Array {
  const groups = new Map<number, number[]>();
  for (let i = 0; i < rewards.length; i++) {
    const members = groups.get(groupIds[i]) ?? [];
    members.push(i);
    groups.set(groupIds[i], members);
  }
  const out = new Float64Array(rewards.length);
  for (const members of groups.values()) {
    const n = members.length;
    let mean = 0;
    let std = 1;
    if (n > 1) {
      mean = members.reduce((s, i) => s + rewards[i], 0) / n;
      std = Math.sqrt(members.reduce((s, i) => s + (rewards[i] - mean) ** 2, 0) / (n - 1));
    }
    for (const i of members) {
      const centered = rewards[i] - mean;
      // A zero-variance group with epsilon 0 keeps its r - mean = 0 rather than 0/0 (documented).
      out[i] = scaleByStd && std + epsilon !== 0 ? centered / (std + epsilon) : centered;
    }
  }
  return out;
}

// The fused form the benchmark times as its "TypeScript, 1 thread" peer: the same math written
// for speed (single passes, no allocation per call), checked against the reference above in
// the op test.

/**
 * GRPO group advantages in plain TypeScript, single-threaded, for contiguous groups:
 * mean, unbiased std, then (r − mean)/(std + ε); a group of one has mean 0 and std 1.
 */
export function groupAdvantagesTs(rewards: Float32Array, groupSize: number, epsilon: number, out: Float32Array): void {
  for (let first = 0; first < rewards.length; first += groupSize) {
    const end = first + groupSize;
    let mean = 0;
    let std = 1;
    if (groupSize > 1) {
      let sum = 0;
      for (let i = first; i < end; i++) sum += rewards[i];
      mean = sum / groupSize;
      let squares = 0;
      for (let i = first; i < end; i++) squares += (rewards[i] - mean) ** 2;
      std = Math.sqrt(squares / (groupSize - 1));
    }
    const scale = 1 / (std + epsilon);
    for (let i = first; i < end; i++) out[i] = (rewards[i] - mean) * scale;
  }
}
