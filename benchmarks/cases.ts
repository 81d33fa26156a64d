/** Every op's benchmark cases, in report order. One file per op registers its own. */
import type { BenchCase } from './harness.js';
import { cases as feedbackMask } from './feedback_mask.js';

export const allCases: BenchCase[] = [...feedbackMask];
