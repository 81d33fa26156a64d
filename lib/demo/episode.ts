/**
 * Episodes: one problem, the tokens of the whole multi-turn exchange, each token's role
 * (prompt, action, feedback) and, for sampled tokens, the behaviour log-probability.
 */
import { Role } from '../kernels/index.js';
import type { TurnKind } from './environment.js';
import type { Problem } from './problems.js';

export interface Turn {
  kind: TurnKind;
  toolStatus?: 'success' | 'error';
  /** Token range [start, end) of the action in the episode. */
  start: number;
  end: number;
}

export interface Episode {
  problem: Problem;
  tokens: number[];
  roles: number[];
  /** log π_old(token) for action tokens, 0 elsewhere. */
  behaviourLogp: number[];
  turns: Turn[];
  answer?: string;
  reward: number;
  /** Any turn with neither a complete tool call nor a final answer (SimpleTIR). */
  hasVoidTurn: boolean;
}

export function newEpisode(problem: Problem, prompt: readonly number[]): Episode {
  return {
    problem,
    tokens: [...prompt],
    roles: prompt.map(() => Role.prompt),
    behaviourLogp: prompt.map(() => 0),
    turns: [],
    reward: 0,
    hasVoidTurn: false,
  };
}

export function appendTokens(episode: Episode, tokens: readonly number[], role: number, logp?: readonly number[]): void {
  for (let i = 0; i < tokens.length; i++) {
    episode.tokens.push(tokens[i]);
    episode.roles.push(role);
    episode.behaviourLogp.push(logp?.[i] ?? 0);
  }
}
