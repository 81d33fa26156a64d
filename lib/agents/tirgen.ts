/**
 * TIRGen (THOR's data pipeline): a generator writes a solution one step at a time, a refiner
 * turns each step's computation into code, the code is run in the sandbox, and only steps
 * whose code runs are kept; a solution is kept only when its final answer matches the
 * reference. The result is JSONL of tool-integrated reasoning trajectories for training.
 */
import type { Writable } from 'node:stream';
import { extractAnswer } from '../rewards/extract.js';
import { toChatMessages, type TrajectoryChatMessage as ChatMessage } from '../trajectory/chat.js';
import { writeTrajectories } from '../trajectory/jsonl.js';
import type { Trajectory } from '../trajectory/model.js';
import { checkTask, lastCodeBlock, responseText, startTrajectory, toolUse, type AgentTask, type ToolUse, type ToolUseOptions } from './common.js';
import { mathReward } from '../rewards/episode.js';
import { checkPolicy, type AgentPolicy } from './agent_policy.js';
import { checkObject, checkString, functionOption, positiveOption, rangeError, stringOption, typeError } from '../check.js';

/** Default system prompt of the generator. */
export const TIRGEN_GENERATOR_SYSTEM_PROMPT =
  'Solve the problem one step at a time. Write only the next step. When you know the result, write the final step with ' +
  'the answer as \\boxed{answer}.';

/** Default system prompt of the refiner. */
export const TIRGEN_REFINER_SYSTEM_PROMPT =
  'You turn a reasoning step into tool-integrated reasoning. If the step computes something, rewrite it so that the ' +
  'computation is done by one ```python block that prints its result; otherwise repeat the step unchanged. Reply with the step only.';

/** Writes the refiner's user message for a step drafted by the generator. */
export type TirGenRefinePrompt = (task: AgentTask, draft: string) => string;

/** Default {@link TirGenRefinePrompt}: the problem and the step. */
export function defaultTirGenRefinePrompt(task: AgentTask, draft: string): string {
  return `Problem:\n${task.prompt}\n\nStep:\n${draft}`;
}

/** How the construction of one solution ended. */
export type TirGenOutcome = 'verified' | 'wrong-answer' | 'no-answer' | 'not-executable';

/** One constructed solution. */
export interface TirGenResult {
  /** The solution: the kept steps (code steps with their output); reward 1 when verified, else 0. */
  trajectory: Trajectory;
  outcome: TirGenOutcome;
  /** Whether the solution is training data (outcome 'verified'). */
  kept: boolean;
}

/** What {@link TIRGen.generate} did. */
export interface TirGenReport {
  /** Tasks processed. */
  attempted: number;
  /** Solutions written. */
  kept: number;
  /** Tasks per outcome. */
  outcomes: Record<TirGenOutcome, number>;
  /** Code steps whose execution failed, dropped and drafted again, over all tasks. */
  discardedSteps: number;
}

/** Options of {@link TIRGen}. */
export interface TirGenOptions extends ToolUseOptions {
  /** Drafts the steps. */
  generator: AgentPolicy;
  /** Rewrites each drafted step with code. May be the same policy as the generator. */
  refiner: AgentPolicy;
  /** Most steps per solution, final step included. Default 8. */
  maxSteps?: number;
  /** Drafts of one step before giving up on the task when none yields code that runs. Default 2. */
  maxStepAttempts?: number;
  /** Generator's system prompt. Default {@link TIRGEN_GENERATOR_SYSTEM_PROMPT}. */
  generatorSystem?: string;
  /** Refiner's system prompt. Default {@link TIRGEN_REFINER_SYSTEM_PROMPT}. */
  refinerSystem?: string;
  /** Refiner's user message. Default {@link defaultTirGenRefinePrompt}. */
  refinePrompt?: TirGenRefinePrompt;
}

/**
 * Generator–refiner construction of tool-integrated reasoning data. For each step, the
 * generator drafts the next step from the solution so far (what the trajectory holds). A
 * draft with a final answer and no code is the last step. Any other draft goes to the
 * refiner, which answers with the step to keep: if it holds a code block (of `codeFence`),
 * the code is run with the code tool and the step is kept, with the program's output as its
 * response, only when the run succeeds — otherwise the step is dropped and drafted again, up
 * to `maxStepAttempts` drafts, after which the task is given up ('not-executable'). A
 * refined step without code is kept as plain reasoning. The final answer is verified with
 * `answersMatch` against the task's gold answers.
 *
 * Kept steps store only their text: a refined step was not sampled from the generator's
 * context, so token ids and log-probs of either policy would be wrong for it.
 */
export class TIRGen {
  readonly #generator: AgentPolicy;
  readonly #refiner: AgentPolicy;
  readonly #maxSteps: number;
  readonly #maxStepAttempts: number;
  readonly #generatorSystem: string;
  readonly #refinerSystem: string;
  readonly #refinePrompt: TirGenRefinePrompt;
  readonly #use: ToolUse & { codeTool: string };

  /** @throws TypeError/RangeError naming the bad option; RangeError when no code tool is registered. */
  constructor(options: TirGenOptions) {
    checkObject('options', options);
    this.#generator = checkPolicy('options.generator', options.generator);
    this.#refiner = checkPolicy('options.refiner', options.refiner);
    this.#maxSteps = positiveOption('options.maxSteps', options.maxSteps, 8);
    this.#maxStepAttempts = positiveOption('options.maxStepAttempts', options.maxStepAttempts, 2);
    this.#generatorSystem = stringOption('options.generatorSystem', options.generatorSystem) ?? TIRGEN_GENERATOR_SYSTEM_PROMPT;
    this.#refinerSystem = stringOption('options.refinerSystem', options.refinerSystem) ?? TIRGEN_REFINER_SYSTEM_PROMPT;
    this.#refinePrompt = functionOption<TirGenRefinePrompt>('options.refinePrompt', options.refinePrompt) ?? defaultTirGenRefinePrompt;
    const use = toolUse(options);
    if (use.codeTool === undefined) {
      throw rangeError('options.codeTool', 'a registered code tool (none named python is registered)', options.codeTool);
    }
    this.#use = { ...use, codeTool: use.codeTool };
  }

  /**
   * Constructs one solution for `task`, which needs a `gold` answer. `metadata` holds
   * `outcome`, `answer` and `discardedSteps`.
   * @throws TypeError when the task has no gold answer.
   */
  async construct(task: AgentTask): Promise<TirGenResult> {
    checkTask(task);
    if (task.gold === undefined) throw typeError('task.gold', 'a reference answer to verify against', task.gold);
    const trajectory = startTrajectory(task, 'tirgen', this.#generatorSystem);
    let discardedSteps = 0;
    let answer: string | null = null;
    let outcome: TirGenOutcome | undefined;
    while (outcome === undefined && trajectory.turns.length < this.#maxSteps) {
      let kept = false;
      for (let attempt = 0; attempt < this.#maxStepAttempts && !kept; attempt++) {
        const draft = (await this.#generator.generate(toChatMessages(trajectory))).text;
        const draftAnswer = extractAnswer(draft);
        if (draftAnswer !== null && lastCodeBlock(draft, this.#use.codeFence) === null) {
          trajectory.turns.push({ action: { text: draft } });
          answer = draftAnswer;
          outcome = mathReward(answer, task) === 1 ? 'verified' : 'wrong-answer';
          kept = true;
          break;
        }
        const messages: ChatMessage[] = [
          { role: 'system', content: this.#refinerSystem },
          { role: 'user', content: checkString('refinePrompt(task, draft)', this.#refinePrompt(task, draft)) },
        ];
        const step = (await this.#refiner.generate(messages)).text;
        const code = lastCodeBlock(step, this.#use.codeFence);
        if (code === null) {
          trajectory.turns.push({ action: { text: step } });
          kept = true;
          break;
        }
        const result = await this.#use.tools.call(this.#use.codeTool, { code });
        if (result.status !== 'success') {
          discardedSteps++;
          continue;
        }
        trajectory.turns.push({ action: { text: step }, response: { toolName: this.#use.codeTool, status: 'success', text: responseText(result) } });
        kept = true;
      }
      if (!kept) outcome = 'not-executable';
    }
    outcome ??= 'no-answer';
    if (outcome === 'no-answer') trajectory.truncated = true;
    Object.assign(trajectory.metadata!, { outcome, answer, discardedSteps });
    trajectory.reward = outcome === 'verified' ? 1 : 0;
    return { trajectory, outcome, kept: outcome === 'verified' };
  }

  /**
   * Constructs a solution for each task in turn and writes the verified ones as JSONL (the
   * SDK's `writeTrajectories`) to a file path (created or truncated) or a writable stream
   * (left open).
   */
  async generate(tasks: Iterable<AgentTask> | AsyncIterable<AgentTask>, destination: string | Writable): Promise<TirGenReport> {
    if (tasks === null || typeof tasks !== 'object' ||
        (typeof (tasks as Iterable<AgentTask>)[Symbol.iterator] !== 'function' && typeof (tasks as AsyncIterable<AgentTask>)[Symbol.asyncIterator] !== 'function')) {
      throw typeError('tasks', 'an iterable of tasks', tasks);
    }
    const report: TirGenReport = {
      attempted: 0, kept: 0, discardedSteps: 0,
      outcomes: { 'verified': 0, 'wrong-answer': 0, 'no-answer': 0, 'not-executable': 0 },
    };
    const construct = this.construct.bind(this);
    async function* verified(): AsyncGenerator<Trajectory> {
      for await (const task of tasks) {
        const result = await construct(task);
        report.attempted++;
        report.outcomes[result.outcome]++;
        report.discardedSteps += result.trajectory.metadata!.discardedSteps as number;
        if (result.kept) yield result.trajectory;
      }
    }
    report.kept = await writeTrajectories(destination, verified());
    return report;
  }
}
