export { extractAnswer, findAnswer, type AnswerSource, type FoundAnswer } from './extract.js';
export { answersMatch, verifyAnswer, type AnswerVerdict, type VerifyOptions, type VerifyReason } from './math.js';
export { verifyAnswers, type BatchOptions, type BatchItem } from './verify_batch.js';
export { qaExactMatch, qaF1, normalizeQaAnswer } from './qa.js';
export { checkFormat, type FormatOptions } from './format.js';
export { mathReward, qaReward, type GoldAnswers } from './episode.js';
