export { extractAnswer } from './extract.js';
export { answersMatch } from './math.js';
export { qaExactMatch, qaF1, normalizeQaAnswer } from './qa.js';
export { checkFormat, type FormatOptions } from './format.js';
export { mathReward, qaReward, type GoldAnswers } from './episode.js';
