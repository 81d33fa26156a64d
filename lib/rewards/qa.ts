/**
 * Exact match and token F1 for search/QA tasks, with SQuAD's answer normalisation
 * (lowercase, punctuation and the articles a/an/the removed, whitespace collapsed).
 */
import { extractAnswer } from './extract.js';

/** Longest text normalised; the rest of a megabyte output cannot be an answer. */
const MAX_QA_CHARS = 100_000;

/** SQuAD normalisation of an answer string. */
export function normalizeQaAnswer(text: string): string {
  if (typeof text !== 'string') return '';
  return text.slice(0, MAX_QA_CHARS)
    .toLowerCase()
    .replace(/[\p{P}\p{S}]/gu, ' ')
    .replace(/\b(?:a|an|the)\b/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
}

/** The answer part of a prediction: extracted (`\boxed{}`, `final_answer()`, "The answer is"), else the whole text. */
function predictedAnswer(prediction: string): string {
  return extractAnswer(prediction) ?? prediction;
}

function golds(gold: string | readonly string[]): string[] {
  if (typeof gold === 'string') return [gold];
  return Array.isArray(gold) ? gold.filter((g): g is string => typeof g === 'string') : [];
}

/**
 * SQuAD exact match: 1 when the normalised predicted answer equals a normalised gold answer
 * (any of several), else 0. The answer is extracted from the prediction first. Never throws.
 */
export function qaExactMatch(prediction: string, gold: string | readonly string[]): number {
  if (typeof prediction !== 'string') return 0;
  const predicted = normalizeQaAnswer(predictedAnswer(prediction));
  return golds(gold).some((g) => normalizeQaAnswer(g) === predicted) ? 1 : 0;
}

/**
 * SQuAD token F1 in [0, 1] between the predicted answer and the best-matching gold answer:
 * harmonic mean of token precision and recall over normalised whitespace tokens, counting
 * repeated tokens as a multiset. Never throws; empty answers score 0 unless both are empty.
 */
export function qaF1(prediction: string, gold: string | readonly string[]): number {
  if (typeof prediction !== 'string') return 0;
  const predicted = normalizeQaAnswer(predictedAnswer(prediction)).split(' ').filter(Boolean);
  let best = 0;
  for (const g of golds(gold)) {
    const expected = normalizeQaAnswer(g).split(' ').filter(Boolean);
    if (predicted.length === 0 || expected.length === 0) {
      best = Math.max(best, predicted.length === expected.length ? 1 : 0);
      continue;
    }
    const counts = new Map<string, number>();
    for (const token of expected) counts.set(token, (counts.get(token) ?? 0) + 1);
    let common = 0;
    for (const token of predicted) {
      const left = counts.get(token) ?? 0;
      if (left > 0) {
        common++;
        counts.set(token, left - 1);
      }
    }
    if (common === 0) continue;
    const precision = common / predicted.length;
    const recall = common / expected.length;
    best = Math.max(best, (2 * precision * recall) / (precision + recall));
  }
  return best;
}
