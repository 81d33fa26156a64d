/**
 * Packing: trajectories → a `TokenBatch`, the flat (ragged) or padded layout the kernels
 * read. Truncation to a maximum length is flagged per sequence, never silent.
 */
import type { Trajectory } from './model.js';
import { Role } from '../kernels/index.js';
import { chatmlTemplate, renderTrajectory, type ChatTemplate } from './template.js';
import type { Tokenizer } from './tokenizer.js';
import { checkArray, checkObject, checkPositiveInteger, rangeError, typeError } from '../check.js';

/**
 * A batch of B token sequences. Token-level arrays have length N = seqOffsets[B]; sequence i
 * occupies [seqOffsets[i], seqOffsets[i+1]) and, when padded, ends with padding (role 3).
 * Turn arrays are indexed by a global turn index; the turns of sequence i are
 * [turnOffsets[i], turnOffsets[i+1]); their positions are absolute token indices.
 */
export interface TokenBatch {
  /** Number of sequences B. */
  size: number;
  tokens: Int32Array;
  /** Role codes: 0 prompt, 1 action, 2 feedback, 3 padding. */
  roles: Uint8Array;
  /** Behaviour-policy log-probs of action tokens; 0 on every other token. */
  behaviourLogprobs: Float32Array;
  /** Sequence boundaries, length B+1. */
  seqOffsets: Int32Array;
  /** Tokens of each sequence without padding, after truncation. */
  lengths: Int32Array;
  /** Tokens each sequence rendered to before truncation. */
  fullLengths: Int32Array;
  /** 1 where packing cut the sequence to `maxLength`. */
  truncated: Uint8Array;
  /** Action tokens of each sequence (after truncation). */
  actionTokenCounts: Int32Array;
  /** Turn ranges per sequence, length B+1. */
  turnOffsets: Int32Array;
  /** Start of each turn's action (absolute; clipped to the sequence when truncated). */
  turnStarts: Int32Array;
  /** End of each turn's action = start of its feedback. */
  turnActionEnds: Int32Array;
  /** End of each turn. */
  turnEnds: Int32Array;
  /** Outcome reward of each sequence; NaN where the trajectory has none. */
  rewards: Float32Array;
  /** Dense group index of each sequence (trajectories without a groupId form groups of one). */
  groupIds: Int32Array;
  /** The groupId string of each dense group index. */
  groupKeys: string[];
  /**
   * Policy version of each sequence: the oldest `policyVersion` of its actions, else the
   * trajectory's; -1 where neither is recorded. Staleness is the trainer's version minus this.
   */
  policyVersions: Int32Array;
  /** 1 where the sequence came whole from the token record, 0 where the template re-tokenised some span (see `RenderedTrajectory.exact`). */
  exact: Uint8Array;
  /** The trajectories, in batch order, kept whole so filtered episodes remain in reports and logs. */
  trajectories: Trajectory[];
  /** Padded length T when the batch is padded, else null (ragged). */
  paddedLength: number | null;
}

/** Options for `packTrajectories`. */
export interface PackOptions {
  tokenizer: Tokenizer;
  /** Default `chatmlTemplate`. */
  template?: ChatTemplate;
  /** Longest sequence in tokens; longer ones are cut and flagged in `truncated`. Default: no limit. */
  maxLength?: number;
  /**
   * 'ragged' (default): sequences back to back. 'longest': pad each to the longest in the
   * batch. A number T: pad each to T (sequences longer than T are truncated to T).
   */
  padding?: 'ragged' | 'longest' | number;
  /** Token id written at padding positions. Default: the tokenizer's `<|endoftext|>`, else 0. */
  padTokenId?: number;
}

/** The oldest policy version that sampled any action of `trajectory`; -1 when none is recorded. */
export function sequencePolicyVersion(trajectory: Trajectory): number {
  let oldest = Infinity;
  for (const turn of trajectory.turns) {
    const version = turn.action.policyVersion ?? trajectory.policyVersion;
    if (version !== undefined && version < oldest) oldest = version;
  }
  if (oldest === Infinity) oldest = trajectory.policyVersion ?? -1;
  return oldest;
}

/**
 * Renders and packs trajectories into a `TokenBatch`. Loss masks come from the kernel:
 * `feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets, keep })`.
 */
export function packTrajectories(trajectories: readonly Trajectory[], options: PackOptions): TokenBatch {
  checkArray('trajectories', trajectories);
  checkObject('options', options);
  const tokenizer = options.tokenizer as Tokenizer | undefined;
  if (tokenizer === null || typeof tokenizer !== 'object' || typeof tokenizer.encode !== 'function' || typeof tokenizer.specialTokenId !== 'function') {
    throw typeError('options.tokenizer', 'a Tokenizer', tokenizer);
  }
  const template = options.template ?? chatmlTemplate;
  const padding = options.padding ?? 'ragged';
  if (padding !== 'ragged' && padding !== 'longest') checkPositiveInteger('options.padding', padding);
  let maxLength = options.maxLength === undefined ? Infinity : checkPositiveInteger('options.maxLength', options.maxLength);
  if (typeof padding === 'number') maxLength = Math.min(maxLength, padding);
  const padTokenId = options.padTokenId
    ?? (options.tokenizer.specialTokens['<|endoftext|>'] ?? 0);
  if (!Number.isInteger(padTokenId) || padTokenId < 0) throw rangeError('options.padTokenId', 'a non-negative integer', padTokenId);

  const size = trajectories.length;
  const rendered = trajectories.map((trajectory, i) => {
    try {
      return renderTrajectory(trajectory, options.tokenizer, template);
    } catch (error) {
      if (error instanceof TypeError || error instanceof RangeError) {
        const ErrorType = error.constructor as typeof TypeError;
        throw new ErrorType(`trajectories[${i}]: ${error.message}`, { cause: error });
      }
      throw error;
    }
  });
  const lengths = new Int32Array(size);
  const fullLengths = new Int32Array(size);
  const truncated = new Uint8Array(size);
  let longest = 0;
  for (let i = 0; i < size; i++) {
    fullLengths[i] = rendered[i]!.tokens.length;
    lengths[i] = Math.min(fullLengths[i]!, maxLength);
    truncated[i] = fullLengths[i]! > lengths[i]! ? 1 : 0;
    longest = Math.max(longest, lengths[i]!);
  }
  const paddedLength = padding === 'ragged' ? null : padding === 'longest' ? longest : padding;
  const seqOffsets = new Int32Array(size + 1);
  for (let i = 0; i < size; i++) seqOffsets[i + 1] = seqOffsets[i]! + (paddedLength ?? lengths[i]!);
  const total = seqOffsets[size]!;
  const tokens = new Int32Array(total).fill(padTokenId);
  const roles = new Uint8Array(total).fill(Role.padding);
  const behaviourLogprobs = new Float32Array(total);
  const actionTokenCounts = new Int32Array(size);
  const turnOffsets = new Int32Array(size + 1);
  for (let i = 0; i < size; i++) turnOffsets[i + 1] = turnOffsets[i]! + rendered[i]!.turnStarts.length;
  const turnCount = turnOffsets[size]!;
  const turnStarts = new Int32Array(turnCount);
  const turnActionEnds = new Int32Array(turnCount);
  const turnEnds = new Int32Array(turnCount);

  for (let i = 0; i < size; i++) {
    const r = rendered[i]!;
    const base = seqOffsets[i]!;
    const length = lengths[i]!;
    for (let t = 0; t < length; t++) {
      tokens[base + t] = r.tokens[t]!;
      roles[base + t] = r.roles[t]!;
      if (r.roles[t] === Role.action) {
        behaviourLogprobs[base + t] = r.logprobs[t]!;
        actionTokenCounts[i]!++;
      }
    }
    for (let k = 0; k < r.turnStarts.length; k++) {
      const turn = turnOffsets[i]! + k;
      turnStarts[turn] = base + Math.min(r.turnStarts[k]!, length);
      turnActionEnds[turn] = base + Math.min(r.turnActionEnds[k]!, length);
      turnEnds[turn] = base + Math.min(r.turnEnds[k]!, length);
    }
  }

  const policyVersions = new Int32Array(size);
  const exact = new Uint8Array(size);
  for (let i = 0; i < size; i++) {
    policyVersions[i] = sequencePolicyVersion(trajectories[i]!);
    exact[i] = rendered[i]!.exact ? 1 : 0;
  }

  const groupIndex = new Map<string, number>();
  const groupKeys: string[] = [];
  const groupIds = new Int32Array(size);
  const rewards = new Float32Array(size);
  for (let i = 0; i < size; i++) {
    const trajectory = trajectories[i]!;
    // An episode without a group is its own group; its id keeps it apart from named groups.
    const key = trajectory.groupId ?? `\u0000${trajectory.id}\u0000${i}`;
    let index = groupIndex.get(key);
    if (index === undefined) {
      index = groupKeys.length;
      groupIndex.set(key, index);
      groupKeys.push(trajectory.groupId ?? trajectory.id);
    }
    groupIds[i] = index;
    const reward = trajectory.reward;
    if (reward !== undefined && typeof reward !== 'number') throw typeError(`trajectories[${i}].reward`, 'a number', reward);
    rewards[i] = reward ?? Number.NaN;
  }

  return {
    size, tokens, roles, behaviourLogprobs, seqOffsets, lengths, fullLengths, truncated, actionTokenCounts,
    turnOffsets, turnStarts, turnActionEnds, turnEnds, rewards, groupIds, groupKeys, policyVersions, exact,
    trajectories: trajectories.slice(), paddedLength,
  };
}
