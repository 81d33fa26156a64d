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

