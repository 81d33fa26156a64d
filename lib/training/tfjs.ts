/**
 * TensorFlow.js adapter (`tirl/tfjs`): tirl's kernels as tfjs ops with custom gradients
 * (`tfjs_ops.ts`), and `TfjsPolicy`, a tfjs model as the trainers' `Policy`
 * (`tfjs_policy.ts`).
 *
 * Import it from its own subpath so that the package root never loads tfjs:
 * `import { tokenLogprobs, ppoLoss } from 'tirl/tfjs'`. `@tensorflow/tfjs` is an optional
 * peer dependency.
 */
export {
  dpoLoss,
  ppoLoss,
  sequenceLogprobs,
  tokenLogprobs,
  type TfjsDpoLossOptions,
  type TfjsPpoLossOptions,
  type TfjsSequenceLogprobsOptions,
  type TfjsTokenLogprobsOptions,
  type TfjsTokenLogprobsResult,
} from './tfjs_ops.js';
export { TfjsPolicy, type TfjsPolicyOptions, type TfjsTokenizer } from './tfjs_policy.js';
export { LlamaModel, type LlamaConfig, type LlamaGgufVocabulary } from './llama.js';
