/**
 * THOR's self-correction: when a step's code fails to run, the step is taken back and
 * sampled again from the same context (or, optionally, answered with a correction message),
 * up to a backtrack depth; every attempt is kept, with its tokens.
 */
import { extractAnswer } from '../rewards/extract.js';
import { toChatMessages } from '../trajectory/chat.js';
import type { Action, ToolFeedback, Trajectory, Turn } from '../trajectory/model.js';
import { checkTask, executeAction, finishTrajectory, openSession, startTrajectory, takeGeneration, toolUse, type AgentTask, type AnswerExtractor, type RewardFunction, type ToolUse, type ToolUseOptions } from './common.js';
import { mathReward } from '../rewards/episode.js';
import { checkPolicy, type AgentPolicy } from './agent_policy.js';
import { checkObject, checkString, functionOption, nonNegativeOption, positiveOption, stringOption, typeError } from '../check.js';

/** Default system prompt of {@link SelfCorrectingAgent}. */
export const SELF_CORRECTING_SYSTEM_PROMPT =
  'Solve the problem step by step. A step may include one ```python code block; it is run and you see its output. ' +
  'Give the final answer as \\boxed{answer}.';

/** Writes the message that asks for a failed step again, given that step and its error. */
export type CorrectionPrompt = (failed: Action, response: ToolFeedback) => string;

/** Default {@link CorrectionPrompt}: shows the failed step and its error, and asks for the step again. */
export function defaultCorrectionPrompt(failed: Action, response: ToolFeedback): string {
  const outcome = response.status === 'timeout' ? 'timed out' : 'failed';
  return `Your previous attempt at the next step ${outcome} when it ran:\n\n${failed.text}\n\n` +
    `Error:\n${response.text}\n\nWrite that step again so that its code runs correctly.`;
}

/**
 * How a failed step is written again. 'resample' (THOR): it is dropped and sampled again
 * from the same context, the one the trajectory holds before that step, without the error;
 * every attempt at a step is then an alternative from one prefix (what the trainer's step
 * level compares). 'correct': the failed step stays in the trajectory and its response is
 * the error followed by the correction message, so the next attempt is sampled from exactly
 * the context the trajectory holds.
 */
export type RetryMode = 'resample' | 'correct';

/** One generation of a step, kept in `metadata.attempts` of the episode. */
export interface StepAttempt {
  /**
   * The step's turn index in the final trajectory: with 'resample' every attempt at a step
   * shares it (and its context); with 'correct' each attempt is a turn of its own.
   */
  step: number;
  /** 0 for the first try at the step, k for its k-th regeneration. */
  attempt: number;
  action: Action;
  /** The execution's response; absent when the attempt ran nothing. */
  response?: ToolFeedback;
  /** The correction message appended to this failed attempt's response ('correct' only). */
  correction?: string;
  /**
   * Whether the attempt failed and was written again: with 'resample' it is then not in the
   * final trajectory; with 'correct' it stays, its response carrying the correction.
   */
  backtracked: boolean;
}

/** Options of {@link SelfCorrectingAgent}. */
export interface SelfCorrectingAgentOptions extends ToolUseOptions {
  policy: AgentPolicy;
  /** Most regenerations of one failed step (the backtrack depth); 0 never backtracks. Default 2. */
  maxBacktracks?: number;
  /** Most steps (turns) in the final trajectory, answer included. Default 8. */
  maxTurns?: number;
  /** System prompt. Default {@link SELF_CORRECTING_SYSTEM_PROMPT}. */
  system?: string;
  /** How a failed step is written again. Default 'resample'. */
  retry?: RetryMode;
  /** Message that asks for a failed step again ('correct'). Default {@link defaultCorrectionPrompt}. */
  correctionPrompt?: CorrectionPrompt;
  /** Reward of an episode whose task has a gold answer. Default `mathReward`. */
  reward?: RewardFunction;
  /** Reads the final answer out of a step's text. Default `extractAnswer`. */
  answer?: AnswerExtractor;
  /**
   * End the episode at a void step, one that neither runs code nor answers (SimpleTIR);
   * `metadata.voidTurn` is then its index. Default false: the model goes on from it.
   */
  endAtVoidTurn?: boolean;
}

/**
 * Runs THOR-style self-correcting episodes. Each step is generated from the trajectory so
 * far, with the tool use's stop sequences (the output fence, so the model stops after its
 * code block); when its execution fails (status 'error' or 'timeout') the step is written
 * again (see {@link RetryMode}), up to `maxBacktracks` times. When the depth is spent, the
 * last failed attempt stays in the trajectory with its error, and the model goes on from there.
 *
 * Every attempt is in `metadata.attempts` ({@link StepAttempt}, generation order), with its
 * token ids and log-probs when the policy reports them; each was sampled from the context the
 * trajectory records before its step, so those log-probs are the trajectory's. Also in
 * `metadata`: `backtracks` (their number) and `answer`. Inline code runs in the episode's
 * `codeSession` when there is one: a failed cell leaves no state behind for its retry.
 */
export class SelfCorrectingAgent {
  readonly #policy: AgentPolicy;
  readonly #maxBacktracks: number;
  readonly #maxTurns: number;
  readonly #system: string;
  readonly #retry: RetryMode;
  readonly #correctionPrompt: CorrectionPrompt;
  readonly #reward: RewardFunction;
  readonly #answer: AnswerExtractor;
  readonly #endAtVoidTurn: boolean;
  readonly #use: ToolUse;

  /** @throws TypeError/RangeError naming the bad option. */
  constructor(options: SelfCorrectingAgentOptions) {
    checkObject('options', options);
    this.#policy = checkPolicy('options.policy', options.policy);
    this.#maxBacktracks = nonNegativeOption('options.maxBacktracks', options.maxBacktracks, 2);
    this.#maxTurns = positiveOption('options.maxTurns', options.maxTurns, 8);
    this.#system = stringOption('options.system', options.system) ?? SELF_CORRECTING_SYSTEM_PROMPT;
    const retry = options.retry ?? 'resample';
    if (retry !== 'resample' && retry !== 'correct') throw typeError('options.retry', "'resample' or 'correct'", retry);
    this.#retry = retry;
    this.#correctionPrompt = functionOption<CorrectionPrompt>('options.correctionPrompt', options.correctionPrompt) ?? defaultCorrectionPrompt;
    this.#reward = functionOption<RewardFunction>('options.reward', options.reward) ?? mathReward;
    this.#answer = functionOption<AnswerExtractor>('options.answer', options.answer) ?? extractAnswer;
    if (options.endAtVoidTurn !== undefined && typeof options.endAtVoidTurn !== 'boolean') throw typeError('options.endAtVoidTurn', 'a boolean', options.endAtVoidTurn);
    this.#endAtVoidTurn = options.endAtVoidTurn ?? false;
    this.#use = toolUse(options);
  }

  /** Runs one episode; see the class description for what the trajectory holds. */
  async run(task: AgentTask): Promise<Trajectory> {
    checkTask(task);
    const trajectory = startTrajectory(task, 'self-correcting-agent', this.#system);
    const attempts: StepAttempt[] = [];
    const generateOptions = { tools: this.#use.tools.toOpenAITools(), ...(this.#use.stop.length > 0 ? { stop: this.#use.stop } : {}) };
    const session = openSession(this.#use, task);
    let answer: string | null = null;
    let finished = false;
    let stopped = false;
    // Regenerations of the current step so far ('correct' spreads them over turns).
    let attempt = 0;
    try {
      while (!finished && !stopped && trajectory.turns.length < this.#maxTurns) {
        const step = trajectory.turns.length;
        const { finishReason, action } = takeGeneration(trajectory, await this.#policy.generate(toChatMessages(trajectory), generateOptions));
        const record: StepAttempt = { step, attempt, action, backtracked: false };
        attempts.push(record);
        const turn: Turn = { action };
        if (finishReason === 'length') {
          trajectory.turns.push(turn);
          stopped = true;
          break;
        }
        const response = await executeAction(action, this.#use, session);
        if (response !== undefined) {
          record.response = response;
          turn.response = response;
          if (response.status !== 'success' && attempt < this.#maxBacktracks) {
            record.backtracked = true;
            attempt++;
            if (this.#retry === 'resample') continue;
            const correction = checkString('correctionPrompt(failed, response)', this.#correctionPrompt(action, response));
            record.correction = correction;
            turn.response = { ...response, text: `${response.text}\n\n${correction}` };
            trajectory.turns.push(turn);
            continue;
          }
        } else {
          answer = this.#answer(action.text);
          finished = answer !== null;
          if (!finished && this.#endAtVoidTurn) {
            trajectory.metadata!.voidTurn = step;
            stopped = true;
          }
        }
        trajectory.turns.push(turn);
        attempt = 0;
      }
    } finally {
      await session?.close?.();
    }
    if (!finished && trajectory.metadata!.voidTurn === undefined) trajectory.truncated = true;
    trajectory.metadata!.attempts = structuredClone(attempts);
    trajectory.metadata!.backtracks = attempts.filter((a) => a.backtracked).length;
    return finishTrajectory(trajectory, task, answer, this.#reward);
  }
}
