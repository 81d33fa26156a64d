/**
 * AlphaApollo's multi-turn reasoner: the model reasons, calls a tool, reads its response,
 * and goes on until it answers or runs out of turns. Each turn keeps the model's action
 * apart from the tool's response, as the trajectory model does.
 */
import { extractAnswer } from '../rewards/extract.js';
import { toChatMessages } from '../trajectory/chat.js';
import type { Trajectory } from '../trajectory/model.js';
import { checkTask, executeAction, finishTrajectory, startTrajectory, takeGeneration, toolUse, type AgentTask, type RewardFunction, type ToolUse, type ToolUseOptions } from './common.js';
import { mathReward } from '../rewards/episode.js';
import { checkPolicy, type AgentPolicy } from './agent_policy.js';
import { checkObject, functionOption, positiveOption, stringOption, typeError } from '../check.js';

/** Default system prompt of {@link MultiTurnReasoner}. */
export const REASONER_SYSTEM_PROMPT =
  'Solve the problem step by step. In each turn you may reason, call one tool (or write one ```python code block, ' +
  'which is run and its output shown to you), and read the result. When you are sure, give the final answer as \\boxed{answer}.';

/** Options of {@link MultiTurnReasoner}. */
export interface MultiTurnReasonerOptions extends ToolUseOptions {
  policy: AgentPolicy;
  /** Most turns (policy calls) per episode, answer turn included. Default 8. */
  maxTurns?: number;
  /** System prompt. Default {@link REASONER_SYSTEM_PROMPT}. */
  system?: string;
  /** Reward of an episode whose task has a gold answer. Default `mathReward`. */
  reward?: RewardFunction;
  /**
   * Whether a turn that calls no tool and holds no final answer is reasoning the model goes
   * on with (default true). With false, any turn that calls no tool ends the episode, as
   * with chat models that call tools through a tool-call channel and then just reply; its
   * answer is the extracted final answer, else its whole text, trimmed.
   */
  reasoningTurns?: boolean;
}

/**
 * Runs AlphaApollo-style episodes. A turn is one of: a tool call (structured, or an inline
 * code block run by the code tool) whose response the model reads next turn; an answer (the
 * text holds a final answer, e.g. `\boxed{…}`), which ends the episode; or plain reasoning,
 * which the model continues in its next turn (see `reasoningTurns`). The model sees exactly the trajectory so far.
 * An episode that reaches `maxTurns` without an answer, or whose turn was cut off by the
 * policy's length limit, is marked `truncated`.
 */
export class MultiTurnReasoner {
  readonly #policy: AgentPolicy;
  readonly #maxTurns: number;
  readonly #system: string;
  readonly #reward: RewardFunction;
  readonly #use: ToolUse;
  readonly #reasoningTurns: boolean;

  /** @throws TypeError/RangeError naming the bad option. */
  constructor(options: MultiTurnReasonerOptions) {
    checkObject('options', options);
    this.#policy = checkPolicy('options.policy', options.policy);
    this.#maxTurns = positiveOption('options.maxTurns', options.maxTurns, 8);
    this.#system = stringOption('options.system', options.system) ?? REASONER_SYSTEM_PROMPT;
    this.#reward = functionOption<RewardFunction>('options.reward', options.reward) ?? mathReward;
    this.#use = toolUse(options);
    if (options.reasoningTurns !== undefined && typeof options.reasoningTurns !== 'boolean') {
      throw typeError('options.reasoningTurns', 'a boolean', options.reasoningTurns);
    }
    this.#reasoningTurns = options.reasoningTurns ?? true;
  }

  /**
   * Runs one episode. `metadata.answer` holds the final answer (null without one); the reward
   * is set when the task has a gold answer.
   */
  async run(task: AgentTask): Promise<Trajectory> {
    checkTask(task);
    const trajectory = startTrajectory(task, 'multi-turn-reasoner', this.#system);
    const tools = this.#use.tools.toOpenAITools();
    let answer: string | null = null;
    let finished = false;
    while (!finished && trajectory.turns.length < this.#maxTurns) {
      const { finishReason, action } = takeGeneration(trajectory, await this.#policy.generate(toChatMessages(trajectory), { tools }));
      const turn: Trajectory['turns'][number] = { action };
      trajectory.turns.push(turn);
      if (finishReason === 'length') break;
      const response = await executeAction(action, this.#use);
      if (response !== undefined) {
        turn.response = response;
        continue;
      }
      answer = extractAnswer(action.text) ?? (this.#reasoningTurns ? null : action.text.trim());
      finished = answer !== null;
    }
    if (!finished) trajectory.truncated = true;
    return finishTrajectory(trajectory, task, answer, this.#reward);
  }
}
