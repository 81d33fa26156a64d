/**
 * AlphaApollo's propose–judge–update loop: a candidate solution is proposed, verified (by
 * running its check in a tool, or by a judge model), and refined from the critique and a
 * memory of earlier attempts, for a number of rounds; the best candidate is kept.
 */
import { extractAnswer } from '../rewards/extract.js';
import type { TrajectoryChatMessage as ChatMessage } from '../trajectory/chat.js';
import type { ToolStatus } from '../tools/types.js';
import type { Trajectory } from '../trajectory/model.js';
import { checkTask, finishTrajectory, lastCodeBlock, responseText, startTrajectory, takeGeneration, toolUse, type AgentTask, type RewardFunction, type ToolUseOptions } from './common.js';
import { mathReward } from '../rewards/episode.js';
import { checkPolicy, type AgentPolicy } from './agent_policy.js';
import { checkFiniteNumber, checkObject, checkString, functionOption, nonNegativeOption, positiveOption, rangeError, stringOption, typeError } from '../check.js';

/** A proposed solution, as a verifier sees it. */
export interface Candidate {
  /** The full text of the proposal. */
  text: string;
  /** Its final answer (`extractAnswer`), or null. */
  answer: string | null;
  /** 0-based round that proposed it. */
  round: number;
}

/** A verifier's judgement of a candidate. */
export interface Verdict {
  /** Quality in [0, 1]; the best-scoring candidate is kept. */
  score: number;
  /** Whether the candidate is accepted (the loop may stop there). */
  passed: boolean;
  /** What is wrong or right with it, shown to the proposer in the next round. */
  critique: string;
  /** How the verification itself ran (a check program's status; 'success' for a judge that answered). */
  status: ToolStatus;
}

/** Checks candidates: by running tools, asking a judge policy, or comparing with a reference. */
export interface Verifier {
  /** Name under which verifications appear in the trajectory (`response.toolName`). */
  readonly name: string;
  verify(candidate: Candidate, task: AgentTask): Promise<Verdict>;
}

/** Options of {@link toolVerifier}. */
export type ToolVerifierOptions = ToolUseOptions;

/**
 * A verifier that runs the candidate's last code block (its self-check: write the checks as
 * assertions) with the code tool. The candidate passes, with score 1, when the program runs
 * without error; otherwise it scores 0 and the critique is the error. A candidate without a
 * code block fails. `codeTool` must be registered ('python' by default).
 * @throws RangeError when no code tool is registered.
 */
export function toolVerifier(options: ToolVerifierOptions): Verifier {
  checkObject('options', options);
  const use = toolUse(options);
  const codeTool = use.codeTool;
  if (codeTool === undefined) throw rangeError('options.codeTool', 'a registered code tool (none named python is registered)', options.codeTool);
  return {
    name: codeTool,
    async verify(candidate) {
      const code = lastCodeBlock(candidate.text, use.codeFence);
      if (code === null) {
        return { score: 0, passed: false, status: 'error', critique: `The solution has no \`\`\`${use.codeFence} block that checks it.` };
      }
      const result = await use.tools.call(codeTool, { code });
      const output = responseText(result);
      const passed = result.status === 'success';
      const critique = passed
        ? `The check ran without error.${output === '' ? '' : ` It printed:\n${output}`}`
        : `The check ${result.status === 'timeout' ? 'timed out' : 'failed'}:\n${output}`;
      return { score: passed ? 1 : 0, passed, status: result.status, critique };
    },
  };
}

/** Default judge instructions of {@link judgeVerifier}. */
export const JUDGE_SYSTEM_PROMPT =
  'You are a strict judge. Read the problem and the proposed solution, point out any error, ' +
  'and end with your score as \\boxed{n}, an integer from 0 (wrong) to 10 (certainly correct).';

/** Options of {@link judgeVerifier}. */
export interface JudgeVerifierOptions {
  /** The judge model. */
  policy: AgentPolicy;
  /** The judge's system prompt. Default {@link JUDGE_SYSTEM_PROMPT}. */
  system?: string;
  /** Lowest score in [0, 1] that passes. Default 0.8 (a judge's 8 of 10). */
  passThreshold?: number;
  /** Name in the trajectory. Default 'judge'. */
  name?: string;
}

/**
 * A verifier that asks a judge policy. The judge's whole answer is the critique; its last
 * `\boxed{n}` (n from 0 to 10) gives the score n/10. An answer without a readable score
 * scores 0 and does not pass.
 */
export function judgeVerifier(options: JudgeVerifierOptions): Verifier {
  checkObject('options', options);
  const policy = checkPolicy('options.policy', options.policy);
  const system = stringOption('options.system', options.system) ?? JUDGE_SYSTEM_PROMPT;
  const name = stringOption('options.name', options.name) ?? 'judge';
  const passThreshold = options.passThreshold ?? 0.8;
  if (typeof passThreshold !== 'number' || !(passThreshold >= 0 && passThreshold <= 1)) {
    throw rangeError('options.passThreshold', 'a number in [0, 1]', passThreshold);
  }
  return {
    name,
    async verify(candidate, task) {
      const messages: ChatMessage[] = [
        { role: 'system', content: system },
        { role: 'user', content: `Problem:\n${task.prompt}\n\nProposed solution:\n${candidate.text}` },
      ];
      const { text } = await policy.generate(messages);
      const verdict = extractAnswer(text);
      const points = verdict === null ? Number.NaN : Number(verdict.trim());
      const score = Number.isFinite(points) && points >= 0 && points <= 10 ? points / 10 : 0;
      return { score, passed: score >= passThreshold, status: 'success', critique: text };
    },
  };
}

/** What the loop remembers of one round; kept in `metadata.rounds`. */
export interface RoundRecord {
  /** 0-based round. */
  round: number;
  /** The user message the proposal was written for (the task, then critique and memory from round 1 on). */
  prompt: string;
  answer: string | null;
  score: number;
  passed: boolean;
  critique: string;
}

/**
 * Writes the user message of a refinement round from the task, the latest round (its full
 * proposal text included) and the memory (earlier rounds, oldest first).
 */
export type RefinePrompt = (task: AgentTask, latest: RoundRecord & { text: string }, memory: readonly RoundRecord[]) => string;

/** Longest critique quoted in a refinement prompt, in characters; the memory must stay small. */
export const MAX_CRITIQUE_CHARS = 2000;

function quoteCritique(critique: string): string {
  return critique.length > MAX_CRITIQUE_CHARS ? `${critique.slice(0, MAX_CRITIQUE_CHARS)}…` : critique;
}

/**
 * Default {@link RefinePrompt}: the task, a line per remembered attempt (answer, score,
 * critique), then the latest attempt in full with its critique, and a request to improve.
 */
export function defaultRefinePrompt(task: AgentTask, latest: RoundRecord & { text: string }, memory: readonly RoundRecord[]): string {
  const lines = [task.prompt, ''];
  if (memory.length > 0) {
    lines.push('Earlier attempts:');
    for (const record of memory) {
      lines.push(`- Attempt ${record.round + 1}: answer ${record.answer ?? '(none)'}, score ${record.score.toFixed(2)}. Critique: ${quoteCritique(record.critique)}`);
    }
    lines.push('');
  }
  lines.push(`Your latest attempt (attempt ${latest.round + 1}, score ${latest.score.toFixed(2)}):`, latest.text, '',
    `Critique:\n${quoteCritique(latest.critique)}`, '',
    'Write an improved solution that fixes what the critiques point out. Give the final answer as \\boxed{answer}.');
  return lines.join('\n');
}

/** Default system prompt of {@link ProposeJudgeUpdate}. */
export const PROPOSER_SYSTEM_PROMPT =
  'Solve the problem. Include a ```python block that checks your result with assertions, and give the final answer as \\boxed{answer}.';

/** Options of {@link ProposeJudgeUpdate}. */
export interface ProposeJudgeUpdateOptions {
  /** The proposer. */
  policy: AgentPolicy;
  /** Judges each proposal, e.g. `toolVerifier({ tools })` or `judgeVerifier({ policy })`. */
  verifier: Verifier;
  /** Most rounds (proposals). Default 3. */
  maxRounds?: number;
  /** Earlier rounds remembered in a refinement prompt besides the latest (the most recent ones; 0 for none). Default 3. */
  memorySize?: number;
  /** Stop at the first candidate that passes. Default true. */
  stopWhenPassed?: boolean;
  /** Proposer's system prompt. Default {@link PROPOSER_SYSTEM_PROMPT}. */
  system?: string;
  /** Writes refinement prompts. Default {@link defaultRefinePrompt}. */
  refinePrompt?: RefinePrompt;
  /** Reward of the kept answer when the task has a gold answer. Default `mathReward`. */
  reward?: RewardFunction;
}

const TOOL_STATUSES: readonly ToolStatus[] = ['success', 'error', 'timeout'];

function checkVerifier(name: string, value: unknown): Verifier {
  if (value === null || typeof value !== 'object' || typeof (value as Verifier).verify !== 'function' ||
      typeof (value as Verifier).name !== 'string') {
    throw typeError(name, 'a verifier (an object with a name and a verify(candidate, task) method)', value);
  }
  return value as Verifier;
}

/**
 * Runs propose → verify → refine rounds. Round 0 proposes from the task alone; each later
 * round proposes from one user message holding the task, the memory of earlier rounds and
 * the latest proposal with its critique ({@link RefinePrompt}), not the whole conversation,
 * so the context stays bounded however many rounds run.
 *
 * The trajectory holds one turn per round: the proposal as the action and its verification
 * as the response (tool name: the verifier's name; status: how the verification ran; text:
 * the critique). Each proposal was generated from the prompt in `metadata.rounds[k].prompt`.
 * `metadata.best` is the round kept (highest score, the earliest on ties), `metadata.answer`
 * its answer, which the reward scores.
 */
export class ProposeJudgeUpdate {
  readonly #policy: AgentPolicy;
  readonly #verifier: Verifier;
  readonly #maxRounds: number;
  readonly #memorySize: number;
  readonly #stopWhenPassed: boolean;
  readonly #system: string;
  readonly #refinePrompt: RefinePrompt;
  readonly #reward: RewardFunction;

  /** @throws TypeError/RangeError naming the bad option. */
  constructor(options: ProposeJudgeUpdateOptions) {
    checkObject('options', options);
    this.#policy = checkPolicy('options.policy', options.policy);
    this.#verifier = checkVerifier('options.verifier', options.verifier);
    this.#maxRounds = positiveOption('options.maxRounds', options.maxRounds, 3);
    this.#memorySize = nonNegativeOption('options.memorySize', options.memorySize, 3);
    if (options.stopWhenPassed !== undefined && typeof options.stopWhenPassed !== 'boolean') {
      throw typeError('options.stopWhenPassed', 'a boolean', options.stopWhenPassed);
    }
    this.#stopWhenPassed = options.stopWhenPassed ?? true;
    this.#system = stringOption('options.system', options.system) ?? PROPOSER_SYSTEM_PROMPT;
    this.#refinePrompt = functionOption<RefinePrompt>('options.refinePrompt', options.refinePrompt) ?? defaultRefinePrompt;
    this.#reward = functionOption<RewardFunction>('options.reward', options.reward) ?? mathReward;
  }

  /** Runs the rounds for one task; see the class description for what the trajectory holds. */
  async run(task: AgentTask): Promise<Trajectory> {
    checkTask(task);
    const trajectory = startTrajectory(task, 'propose-judge-update', this.#system);
    const rounds: RoundRecord[] = [];
    let prompt = task.prompt;
    let best = -1;
    for (let round = 0; round < this.#maxRounds; round++) {
      const messages: ChatMessage[] = [{ role: 'system', content: this.#system }, { role: 'user', content: prompt }];
      const { finishReason, action } = takeGeneration(trajectory, await this.#policy.generate(messages));
      const candidate: Candidate = { text: action.text, answer: extractAnswer(action.text), round };
      const verdict = await this.#verifier.verify(candidate, task);
      checkObject('verdict', verdict);
      const score = checkFiniteNumber('verdict.score', verdict.score);
      const critique = checkString('verdict.critique', verdict.critique);
      if (!TOOL_STATUSES.includes(verdict.status)) throw typeError('verdict.status', "'success', 'error' or 'timeout'", verdict.status);
      const record: RoundRecord = { round, prompt, answer: candidate.answer, score, passed: verdict.passed === true, critique };
      rounds.push(record);
      trajectory.turns.push({ action, response: { toolName: this.#verifier.name, status: verdict.status, text: critique } });
      if (best < 0 || score > rounds[best]!.score) best = round;
      if (finishReason === 'length') trajectory.truncated = true;
      if ((record.passed && this.#stopWhenPassed) || round + 1 === this.#maxRounds) break;
      const memory = rounds.slice(Math.max(0, round - this.#memorySize), round);
      prompt = checkString('refinePrompt(task, latest, memory)', this.#refinePrompt(task, { ...record, text: action.text }, memory));
    }
    trajectory.metadata!.rounds = structuredClone(rounds);
    trajectory.metadata!.best = best;
    return finishTrajectory(trajectory, task, rounds[best]!.answer, this.#reward);
  }
}
