/**
 * THOR's self-correction: when a step's code fails to run, the step is taken back and
 * written again with the error in view, up to a backtrack depth; every attempt is kept.
 */
import { extractAnswer } from '../rewards/extract.js';
import { toChatMessages, type TrajectoryChatMessage as ChatMessage } from '../trajectory/chat.js';
import type { Action, ToolFeedback, Trajectory, Turn } from '../trajectory/model.js';
import { checkTask, executeAction, finishTrajectory, startTrajectory, takeGeneration, toolUse, type AgentTask, type RewardFunction, type ToolUse, type ToolUseOptions } from './common.js';
import { mathReward } from '../rewards/episode.js';
import { checkPolicy, type AgentPolicy } from './agent_policy.js';
import { checkObject, checkString, functionOption, nonNegativeOption, positiveOption, stringOption } from '../check.js';

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

/** One generation of a step, kept in `metadata.attempts` of the episode. */
export interface StepAttempt {
  /** Index of the step (turn) in the final trajectory that this attempt tried to write. */
  step: number;
  /** 0 for the first try at the step, k for its k-th regeneration. */
  attempt: number;
  action: Action;
  /** The execution's response; absent when the attempt ran nothing. */
  response?: ToolFeedback;
  /** The correction message the attempt was generated with (absent for a first try). */
  correction?: string;
  /** Whether the attempt failed and was taken back (it is not in the final trajectory). */
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
  /** Message that asks for a failed step again. Default {@link defaultCorrectionPrompt}. */
  correctionPrompt?: CorrectionPrompt;
  /** Reward of an episode whose task has a gold answer. Default `mathReward`. */
  reward?: RewardFunction;
}

/**
 * Runs THOR-style self-correcting episodes. Each step is generated from the trajectory so
 * far; when its execution fails (status 'error' or 'timeout'), the step is backtracked —
 * dropped from the context — and generated again from the same prefix plus one correction
 * message showing the failed step and its error (only the latest failure of that step), up
 * to `maxBacktracks` times. When the depth is spent, the last failed attempt stays in the
 * trajectory with its error, and the model goes on from there.
 *
 * The trajectory is the final path: the steps kept, without the backtracked attempts, which
 * are all in `metadata.attempts` ({@link StepAttempt}, generation order) with the correction
 * each was generated with. A regenerated step was sampled with its correction message in
 * context, which the path does not hold; its log-probs refer to that context. Also in
 * `metadata`: `backtracks` (their number) and `answer`.
 */
export class SelfCorrectingAgent {
  readonly #policy: AgentPolicy;
  readonly #maxBacktracks: number;
  readonly #maxTurns: number;
  readonly #system: string;
  readonly #correctionPrompt: CorrectionPrompt;
  readonly #reward: RewardFunction;
  readonly #use: ToolUse;

  /** @throws TypeError/RangeError naming the bad option. */
  constructor(options: SelfCorrectingAgentOptions) {
    checkObject('options', options);
    this.#policy = checkPolicy('options.policy', options.policy);
    this.#maxBacktracks = nonNegativeOption('options.maxBacktracks', options.maxBacktracks, 2);
    this.#maxTurns = positiveOption('options.maxTurns', options.maxTurns, 8);
    this.#system = stringOption('options.system', options.system) ?? SELF_CORRECTING_SYSTEM_PROMPT;
    this.#correctionPrompt = functionOption<CorrectionPrompt>('options.correctionPrompt', options.correctionPrompt) ?? defaultCorrectionPrompt;
    this.#reward = functionOption<RewardFunction>('options.reward', options.reward) ?? mathReward;
    this.#use = toolUse(options);
  }

  /** Runs one episode; see the class description for what the trajectory holds. */
  async run(task: AgentTask): Promise<Trajectory> {
    checkTask(task);
    const trajectory = startTrajectory(task, 'self-correcting-agent', this.#system);
    const attempts: StepAttempt[] = [];
    const tools = this.#use.tools.toOpenAITools();
    let answer: string | null = null;
    let finished = false;
    let cutOff = false;
    while (!finished && !cutOff && trajectory.turns.length < this.#maxTurns) {
      const step = trajectory.turns.length;
      const prefix = toChatMessages(trajectory);
      let correction: string | undefined;
      for (let attempt = 0; ; attempt++) {
        const messages: ChatMessage[] = correction === undefined ? prefix : [...prefix, { role: 'user', content: correction }];
        const { finishReason, action } = takeGeneration(trajectory, await this.#policy.generate(messages, { tools }));
        const record: StepAttempt = { step, attempt, action, backtracked: false };
        if (correction !== undefined) record.correction = correction;
        attempts.push(record);
        const turn: Turn = { action };
        if (finishReason === 'length') {
          trajectory.turns.push(turn);
          cutOff = true;
          break;
        }
        const response = await executeAction(action, this.#use);
        if (response !== undefined) {
          record.response = response;
          turn.response = response;
          if (response.status !== 'success' && attempt < this.#maxBacktracks) {
            record.backtracked = true;
            correction = checkString('correctionPrompt(failed, response)', this.#correctionPrompt(action, response));
            continue;
          }
        } else {
          answer = extractAnswer(action.text);
          finished = answer !== null;
        }
        trajectory.turns.push(turn);
        break;
      }
    }
    if (!finished) trajectory.truncated = true;
    trajectory.metadata!.attempts = structuredClone(attempts);
    trajectory.metadata!.backtracks = attempts.filter((attempt) => attempt.backtracked).length;
    return finishTrajectory(trajectory, task, answer, this.#reward);
  }
}
