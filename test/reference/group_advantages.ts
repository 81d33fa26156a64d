/**
 * Independent float64 reference of groupAdvantages, straight from MATH.md (verl's convention
 * for groups of one), shared by the op test and the fuzzer.
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
