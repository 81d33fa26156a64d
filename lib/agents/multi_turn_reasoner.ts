/**
 * AlphaApollo's multi-turn reasoner: the model reasons, calls a tool, reads its response,
 * and goes on until it answers or runs out of turns. Each turn keeps the model's action
 * apart from the tool's response, as the trajectory model does.
 */
import { extractAnswer } from '../rewards/extract.js';
import { toChatMessages } from '../trajectory/chat.js';
import type { Trajectory } from '../trajectory/model.js';
import { checkTask, executeAction, finishTrajectory, openSession, startTrajectory, takeGeneration, toolUse, type AgentTask, type AnswerExtractor, type RewardFunction, type ToolUse, type ToolUseOptions } from './common.js';
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
  /**
   * SimpleTIR: end the episode at a void turn, one that neither runs code (or calls a tool)
   * nor gives a final answer; `metadata.voidTurn` is then its index. Default false: such a
   * turn is reasoning the model goes on with (see `reasoningTurns`).
   */
  endAtVoidTurn?: boolean;
  /** Reads the final answer out of a turn's text. Default `extractAnswer` (`\boxed{…}` and the like). */
  answer?: AnswerExtractor;
}

/**
 * Runs AlphaApollo-style episodes. A turn is one of: a tool call (structured, or an inline
 * code block run by the code tool) whose response the model reads next turn; an answer (the
 * text holds a final answer, e.g. `\boxed{…}`), which ends the episode; or plain reasoning,
 * which the model continues in its next turn (see `reasoningTurns`). The model sees exactly the trajectory so far.
 * An episode that reaches `maxTurns` without an answer, or whose turn was cut off by the
 * policy's length limit, is marked `truncated`. With `endAtVoidTurn` (SimpleTIR) a turn that
 * neither runs code nor answers ends the episode instead. Generations carry the tool use's
 * stop sequences (the output fence), and inline code runs in the episode's `codeSession`
 * when there is one, so later cells see earlier cells' state.
 */
export class MultiTurnReasoner {
  readonly #policy: AgentPolicy;
  readonly #maxTurns: number;
  readonly #system: string;
  readonly #reward: RewardFunction;
  readonly #use: ToolUse;
  readonly #reasoningTurns: boolean;
  readonly #endAtVoidTurn: boolean;
  readonly #answer: AnswerExtractor;

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
    if (options.endAtVoidTurn !== undefined && typeof options.endAtVoidTurn !== 'boolean') {
      throw typeError('options.endAtVoidTurn', 'a boolean', options.endAtVoidTurn);
    }
    this.#endAtVoidTurn = options.endAtVoidTurn ?? false;
    this.#answer = functionOption<AnswerExtractor>('options.answer', options.answer) ?? extractAnswer;
  }

  /**
   * Runs one episode. `metadata.answer` holds the final answer (null without one); the reward
   * is set when the task has a gold answer.
   */
  async run(task: AgentTask): Promise<Trajectory> {
    checkTask(task);
    const trajectory = startTrajectory(task, 'multi-turn-reasoner', this.#system);
    const generateOptions = { tools: this.#use.tools.toOpenAITools(), ...(this.#use.stop.length > 0 ? { stop: this.#use.stop } : {}) };
    const session = openSession(this.#use, task);
    let answer: string | null = null;
    let finished = false;
    let voidTurn = false;
    try {
      while (!finished && !voidTurn && trajectory.turns.length < this.#maxTurns) {
        const { finishReason, action } = takeGeneration(trajectory, await this.#policy.generate(toChatMessages(trajectory), generateOptions));
        const turn: Trajectory['turns'][number] = { action };
        trajectory.turns.push(turn);
        if (finishReason === 'length') break;
        const response = await executeAction(action, this.#use, session);
        if (response !== undefined) {
          turn.response = response;
          continue;
        }
        const given = this.#answer(action.text);
        if (given === null && this.#endAtVoidTurn) {
          voidTurn = true;
          trajectory.metadata!.voidTurn = trajectory.turns.length - 1;
          break;
        }
        answer = given ?? (this.#reasoningTurns ? null : action.text.trim());
        finished = answer !== null;
      }
    } finally {
      await session?.close?.();
    }
    if (!finished && !voidTurn) trajectory.truncated = true;
    return finishTrajectory(trajectory, task, answer, this.#reward);
  }
}
