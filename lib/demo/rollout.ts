/**
 * Batched multi-turn rollouts: every episode advances one token per model step. Prompt
 * and tool-feedback tokens are fed to the model as they are (forced); action tokens are
 * sampled, with their log-probabilities recorded as the behaviour policy's.
 */
import * as tf from '@tensorflow/tfjs';

import { Role } from '../kernels/index.js';
import { MAX_TURNS, MAX_TURN_TOKENS, classifyTurn, endsTurn, rewardFor } from './environment.js';
import { appendTokens, newEpisode, type Episode } from './episode.js';
import type { GruLanguageModel } from './model.js';
import type { Problem } from './problems.js';
import type { Random } from './random.js';
import { TOKEN } from './vocab.js';

export interface SamplingOptions {
  /** Softmax temperature; 0 = greedy. */
  temperature: number;
}

interface Slot {
  episode: Episode;
  /** Tokens to feed before sampling again, with their role. */
  forced: { token: number; role: number }[];
  turnTokens: number[];
  turnLogp: number[];
  lastResult?: string;
  done: boolean;
}

/** Samples `token` from `logits` (a row of V) at `temperature`; returns it and its log-prob. */
function sample(logits: Float32Array, offset: number, vocab: number, temperature: number, rng: Random) {
  let max = -Infinity;
  let argmax = 0;
  for (let v = 0; v < vocab; v++) {
    if (logits[offset + v] > max) {
      max = logits[offset + v];
      argmax = v;
    }
  }
  // The log-prob is always that of the temperature-1 policy the loss is computed for.
  let sum = 0;
  for (let v = 0; v < vocab; v++) sum += Math.exp(logits[offset + v] - max);
  const logZ = max + Math.log(sum);
  let token = argmax;
  if (temperature > 0) {
    let scaledSum = 0;
    for (let v = 0; v < vocab; v++) scaledSum += Math.exp((logits[offset + v] - max) / temperature);
    let u = rng.next() * scaledSum;
    for (let v = 0; v < vocab; v++) {
      u -= Math.exp((logits[offset + v] - max) / temperature);
      if (u <= 0) {
        token = v;
        break;
      }
    }
  }
  return { token, logp: logits[offset + token] - logZ };
}

/** Runs one episode per problem with the policy and the calculator tool. */
export function rollout(
  model: GruLanguageModel,
  problems: readonly Problem[],
  promptOf: (problem: Problem) => number[],
  rng: Random,
  { temperature }: SamplingOptions,
): Episode[] {
  const vocab = model.shape.vocabSize;
  const slots: Slot[] = problems.map((problem) => {
    const prompt = promptOf(problem);
    const episode = newEpisode(problem, prompt.slice(0, 1));
    return {
      episode,
      forced: prompt.slice(1).map((token) => ({ token, role: Role.prompt })),
      turnTokens: [],
      turnLogp: [],
      done: false,
    };
  });
  let state = model.initialState(slots.length);
  const inputs = new Int32Array(slots.length);
  while (slots.some((s) => !s.done)) {
    slots.forEach((s, i) => (inputs[i] = s.done ? TOKEN.pad : lastToken(s)));
    const { logits, state: next } = model.step(inputs, state);
    const values = logits.dataSync() as Float32Array;
    tf.dispose([logits, state]);
    state = next;
    slots.forEach((slot, i) => {
      if (slot.done) return;
      const forced = slot.forced.shift();
      if (forced) {
        appendTokens(slot.episode, [forced.token], forced.role);
        return;
      }
      const { token, logp } = sample(values, i * vocab, vocab, temperature, rng);
      slot.turnTokens.push(token);
      slot.turnLogp.push(logp);
      if (endsTurn(token) || slot.turnTokens.length === MAX_TURN_TOKENS) finishTurn(slot);
    });
  }
  state.dispose();
  return slots.map((s) => s.episode);
}

/** The token the model reads next: the latest sampled one, else the latest in the episode. */
function lastToken(slot: Slot): number {
  return slot.turnTokens.length > 0
    ? slot.turnTokens[slot.turnTokens.length - 1]
    : slot.episode.tokens[slot.episode.tokens.length - 1];
}

function finishTurn(slot: Slot): void {
  const { episode } = slot;
  const outcome = classifyTurn(slot.turnTokens, { quantities: episode.problem.quantities, lastResult: slot.lastResult });
  const start = episode.tokens.length;
  appendTokens(episode, slot.turnTokens, Role.action, slot.turnLogp);
  episode.turns.push({ kind: outcome.kind, toolStatus: outcome.toolStatus, start, end: episode.tokens.length });
  slot.turnTokens = [];
  slot.turnLogp = [];
  if (outcome.kind === 'void') {
    episode.hasVoidTurn = true;
    slot.done = true;
  } else if (outcome.kind === 'answer') {
    episode.answer = outcome.answer;
    episode.reward = rewardFor(episode.problem, outcome.answer);
    slot.done = true;
  } else if (episode.turns.length >= MAX_TURNS) {
    slot.done = true;
  } else {
    slot.lastResult = outcome.result ?? slot.lastResult;
    slot.forced.push(...outcome.feedback.map((token) => ({ token, role: Role.feedback })));
  }
}
