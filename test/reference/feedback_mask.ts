import { Role } from '../../lib/index.js';

/** Independent reference of feedbackMask: the rule of MATH.md, token by token (shared by the op test, the fuzzer and `tirl bench`). */
export function reference(roles: Uint8Array, seqOffsets: Int32Array, keep?: Uint8Array) {
  const b = seqOffsets.length - 1;
  const mask = new Uint8Array(roles.length);
  const actionTokens = new Int32Array(b);
  for (let s = 0; s < b; s++) {
    for (let t = seqOffsets[s]; t < seqOffsets[s + 1]; t++) {
      const m = roles[t] === Role.action && (keep === undefined || keep[s] !== 0) ? 1 : 0;
      mask[t] = m;
      actionTokens[s] += m;
    }
  }
  return { mask, actionTokens };
}
