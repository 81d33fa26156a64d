/** Every op's benchmark cases, in report order. One file per op registers its own. */
import type { BenchCase } from './harness.js';
import { cases as ppoLoss } from './ppo_loss.js';
import { cases as tokenLogprobs } from './token_logprobs.js';
import { cases as groupAdvantages } from './group_advantages.js';
import { cases as advantages } from './advantages.js';
import { cases as dpoLoss } from './dpo_loss.js';
import { cases as feedbackMask } from './feedback_mask.js';
import { cases as sequenceLogprobs } from './sequence_logprobs.js';
import { cases as rolloutCorrection } from './rollout_correction.js';

export const allCases: BenchCase[] = [
  ...ppoLoss,
  ...tokenLogprobs,
  ...groupAdvantages,
  ...advantages,
  ...dpoLoss,
  ...feedbackMask,
  ...sequenceLogprobs,
  ...rolloutCorrection,
];
