/**
 * Rollouts: episodes of a policy in environments, recorded token by token with the role
 * of every token (prompt, action, feedback) and the behaviour log-probs of the actions.
 */
import { Role } from '../kernels/index.js';
import { type TokenBatch, type Trajectory, type Turn, USER_FEEDBACK_TOOL } from '../trajectory/index.js';
import type { ToolStatus } from '../tools/types.js';
import type { Environment } from './environment.js';
import type { Policy, PolicyBatch } from './trainable_policy.js';
import type { SeededRandom } from './random.js';

/** One action of an episode and what followed it. */
export interface EpisodeTurn {
  /** The action's text, as the environment received it. */
  action: string;
  /** The action's token span `[actionStart, actionEnd)` in {@link Episode.tokens}. */
  actionStart: number;
  actionEnd: number;
  /** The tool call the action made, if any. */
  tool?: { name: string; status: ToolStatus };
  /** Text fed back after the action ('' for none). */
  feedback: string;
  /** Reward of this step. */
  reward: number;
}

/** A whole episode: its tokens with roles, its turns, and its outcome. */
export interface Episode<Problem> {
  problem: Problem;
  /** The prompt text the environment posed. */
  prompt: string;
  /** Index of the prompt group the episode belongs to (episodes of one problem share it). */
  group: number;
  /** All tokens: prompt, then each action and its feedback. */
  tokens: Int32Array;
  /** Role of each token (see `Role`). */
  roles: Uint8Array;
  /** Behaviour log-probs: the sampler's on action tokens, 0 elsewhere. */
  behaviourLogp: Float32Array;
  turns: EpisodeTurn[];
  /** Sum of the step rewards. */
  reward: number;
  /** What the environment reported at the end; false when the episode never finished. */
  success: boolean;
  /** The environment said the episode is over. */
  done: boolean;
  /** Cut short by the turn or token limit before the environment said done. */
  truncated: boolean;
  /** The oldest weight version that sampled one of its actions; -1 when the policy reports none. */
  policyVersion: number;
}

/** Limits of one episode. */
export interface RolloutLimits {
  /** Most actions per episode. */
  maxTurns: number;
  /** Most tokens per action. */
  maxTurnTokens: number;
  /** Most tokens per episode, prompt and feedback included. */
  maxTokens: number;
}

/** An episode while it is being played. */
class EpisodeBuilder<Problem> {
  tokens: number[] = [];
  roles: number[] = [];
  behaviour: number[] = [];
  turns: EpisodeTurn[] = [];
  reward = 0;
  success = false;
  done = false;
  truncated = false;
  policyVersion = -1;

  prompt = '';

  constructor(
    readonly problem: Problem,
    readonly group: number,
  ) {}

  append(tokens: ArrayLike<number>, role: number, logprobs?: ArrayLike<number>): void {
    for (let i = 0; i < tokens.length; i++) {
      this.tokens.push(tokens[i]);
      this.roles.push(role);
      this.behaviour.push(logprobs ? logprobs[i] : 0);
    }
  }

  /** Drops tokens past `maxTokens`; an episode that loses tokens is truncated. */
  clip(maxTokens: number): void {
    if (this.tokens.length < maxTokens || (this.tokens.length === maxTokens && this.done)) return;
    if (this.tokens.length > maxTokens) {
      this.tokens.length = maxTokens;
      this.roles.length = maxTokens;
      this.behaviour.length = maxTokens;
      for (const turn of this.turns) turn.actionEnd = Math.min(turn.actionEnd, maxTokens);
    }
    if (!this.done) this.truncated = true;
  }

  get open(): boolean {
    return !this.done && !this.truncated;
  }

  finish(): Episode<Problem> {
    return {
      problem: this.problem,
      prompt: this.prompt,
      group: this.group,
      tokens: Int32Array.from(this.tokens),
      roles: Uint8Array.from(this.roles),
      behaviourLogp: Float32Array.from(this.behaviour),
      turns: this.turns,
      reward: this.reward,
      success: this.done && this.success,
      done: this.done,
      truncated: this.truncated,
      policyVersion: this.policyVersion,
    };
  }
}

/**
 * Plays one episode per environment, all in lock step so the policy samples each turn of
 * all open episodes in one batched call. `groups[i]` is the prompt group of episode i.
 */
export async function rollout<Problem>(
  policy: Policy,
  environments: readonly Environment<Problem>[],
  problems: readonly Problem[],
  groups: readonly number[],
  limits: RolloutLimits,
  random: SeededRandom,
): Promise<Episode<Problem>[]> {
  const episodes = problems.map((problem, i) => new EpisodeBuilder(problem, groups[i]));
  const prompts = await Promise.all(problems.map((problem, i) => environments[i].reset(problem)));
  prompts.forEach((prompt, i) => {
    episodes[i].prompt = prompt;
    episodes[i].append(policy.encode(prompt, 'prompt'), Role.prompt);
    episodes[i].clip(limits.maxTokens);
  });
  for (let turn = 0; turn < limits.maxTurns; turn++) {
    const open = episodes.flatMap((e, i) => (e.open ? [i] : []));
    if (open.length === 0) break;
    // An action running past maxTokens is cut by clip() below, which truncates the episode.
    const sampled = await policy.sampleTurns(
      open.map((i) => Int32Array.from(episodes[i].tokens)),
      { maxTokens: limits.maxTurnTokens, random: () => random.next() },
    );
    const results = await Promise.all(open.map((i, k) => environments[i].step(sampled[k].text)));
    open.forEach((i, k) => {
      const episode = episodes[i];
      const result = results[k];
      const actionStart = episode.tokens.length;
      episode.append(sampled[k].tokens, Role.action, sampled[k].logprobs);
      const version = sampled[k].policyVersion;
      if (version !== undefined && (episode.policyVersion < 0 || version < episode.policyVersion)) episode.policyVersion = version;
      episode.turns.push({
        action: sampled[k].text,
        actionStart,
        actionEnd: episode.tokens.length,
        ...(result.tool ? { tool: result.tool } : {}),
        feedback: result.feedback,
        reward: result.reward,
      });
      episode.reward += result.reward;
      episode.done = result.done;
      episode.success = result.success ?? false;
      if (!result.done && result.feedback !== '') episode.append(policy.encode(result.feedback, 'feedback'), Role.feedback);
      episode.clip(limits.maxTokens);
    });
  }
  for (const episode of episodes) if (!episode.done) episode.truncated = true;
  return episodes.map((e) => e.finish());
}

/** Replays `actions` on a fresh episode of `problem`, then steps `next`; returns how `next` went. */
export async function replayStep<Problem>(
  environment: Environment<Problem>,
  problem: Problem,
  actions: readonly string[],
  next: string,
) {
  await environment.reset(problem);
  for (const action of actions) await environment.step(action);
  return environment.step(next);
}

/**
 * Packs token sequences back to back into one ragged batch: `tokens` holds them all and
 * `seqOffsets` (length `sequences.length + 1`) marks where each starts and ends.
 */
export function packSequences(sequences: readonly Int32Array[]): PolicyBatch {
  const seqOffsets = new Int32Array(sequences.length + 1);
  sequences.forEach((s, i) => (seqOffsets[i + 1] = seqOffsets[i] + s.length));
  const tokens = new Int32Array(seqOffsets[sequences.length]);
  sequences.forEach((s, i) => tokens.set(s, seqOffsets[i]));
  return { tokens, seqOffsets };
}

/**
 * The episodes as the trajectory SDK's ragged `TokenBatch`, with the policy's own tokens
 * (nothing is re-tokenized) and each episode as a `Trajectory` (ids `<idPrefix>/<index>`,
 * groups `<idPrefix>/g<group>`), so the SDK's filters, credit and JSONL writers apply.
 */
export function toTokenBatch(episodes: readonly Episode<unknown>[], idPrefix: string): TokenBatch {
  const { tokens, seqOffsets } = packSequences(episodes.map((e) => e.tokens));
  const size = episodes.length;
  const roles = new Uint8Array(tokens.length);
  const behaviourLogprobs = new Float32Array(tokens.length);
  const lengths = new Int32Array(size);
  const actionTokenCounts = new Int32Array(size);
  const turnOffsets = new Int32Array(size + 1);
  episodes.forEach((e, i) => {
    roles.set(e.roles, seqOffsets[i]);
    behaviourLogprobs.set(e.behaviourLogp, seqOffsets[i]);
    lengths[i] = e.tokens.length;
    actionTokenCounts[i] = e.roles.reduce((count, role) => count + (role === Role.action ? 1 : 0), 0);
    turnOffsets[i + 1] = turnOffsets[i] + e.turns.length;
  });
  const turnStarts = new Int32Array(turnOffsets[size]);
  const turnActionEnds = new Int32Array(turnOffsets[size]);
  const turnEnds = new Int32Array(turnOffsets[size]);
  episodes.forEach((e, i) => {
    e.turns.forEach((turn, k) => {
      const index = turnOffsets[i] + k;
      turnStarts[index] = seqOffsets[i] + turn.actionStart;
      turnActionEnds[index] = seqOffsets[i] + turn.actionEnd;
      turnEnds[index] = seqOffsets[i] + (e.turns[k + 1]?.actionStart ?? e.tokens.length);
    });
  });
  const groups = [...new Set(episodes.map((e) => e.group))].sort((a, b) => a - b);
  const groupKeys = groups.map((g) => `${idPrefix}/g${g}`);
  return {
    size,
    tokens,
    roles,
    behaviourLogprobs,
    seqOffsets,
    lengths,
    fullLengths: lengths.slice(),
    // Nothing is cut while packing; episodes cut by the rollout's limits say so in their trajectory.
    truncated: new Uint8Array(size),
    actionTokenCounts,
    turnOffsets,
    turnStarts,
    turnActionEnds,
    turnEnds,
    rewards: Float32Array.from(episodes, (e) => e.reward),
    groupIds: Int32Array.from(episodes, (e) => groups.indexOf(e.group)),
    groupKeys,
    // The sampler's weight version when the policy reports one (-1: it samples with the weights it trains).
    policyVersions: Int32Array.from(episodes, (e) => e.policyVersion ?? -1),
    exact: new Uint8Array(size).fill(1),
    trajectories: episodes.map((e, i) => toTrajectory(e, `${idPrefix}/${i}`, `${idPrefix}/g${e.group}`)),
    paddedLength: null,
  };
}

/** An episode in the SDK's trajectory model; environment text without a tool answers as the user. */
function toTrajectory(episode: Episode<unknown>, id: string, groupId: string): Trajectory {
  const turns = episode.turns.map((turn, k): Turn => {
    const feedbackEnd = episode.turns[k + 1]?.actionStart ?? episode.tokens.length;
    const result: Turn = {
      action: {
        text: turn.action,
        tokenIds: Array.from(episode.tokens.subarray(turn.actionStart, turn.actionEnd)),
        logprobs: Array.from(episode.behaviourLogp.subarray(turn.actionStart, turn.actionEnd)),
      },
      feedbackTokenIds: Array.from(episode.tokens.subarray(turn.actionEnd, feedbackEnd)),
    };
    if (turn.tool) result.response = { toolName: turn.tool.name, status: turn.tool.status, text: turn.feedback };
    else if (turn.feedback !== '') result.response = { toolName: USER_FEEDBACK_TOOL, status: 'success', text: turn.feedback };
    return result;
  });
  const promptTokenIds = Array.from(episode.tokens.subarray(0, episode.turns[0]?.actionStart ?? episode.tokens.length));
  return { id, prompt: episode.prompt, promptTokenIds, turns, reward: episode.reward, groupId, truncated: episode.truncated };
}
