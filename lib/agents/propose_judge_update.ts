/**
 * AlphaApollo's propose–judge–update loop: in each round the multi-turn tool-using reasoner
 * proposes a solution, a verifier judges it (by running its check in a tool, or by a judge
 * model), and the next round starts from a memory of the earlier attempts and their
 * critiques; the best candidate is kept. Conventions from tmlr-group/AlphaApollo commit
 * 712a04dc (`alphaapollo/core/generation/evolving/evolving_main.py`, `run_problem`).
 */
import type { Trajectory } from '../trajectory/model.js';
import type { ToolStatus } from '../tools/types.js';
import type { TrajectoryChatMessage as ChatMessage } from '../trajectory/chat.js';
import { extractAnswer } from '../rewards/extract.js';
import { checkTask, finishTrajectory, lastCodeBlock, responseText, startTrajectory, toolUse, type AgentTask, type RewardFunction, type ToolUseOptions } from './common.js';
import { mathReward } from '../rewards/episode.js';
import { checkPolicy, type AgentPolicy } from './agent_policy.js';
import { MultiTurnReasoner, type MultiTurnReasonerOptions } from './multi_turn_reasoner.js';
import { checkFiniteNumber, checkObject, checkString, functionOption, nonNegativeOption, positiveOption, rangeError, stringOption, typeError } from '../check.js';

/** A proposed solution, as a verifier sees it. */
export interface Candidate {
  /** The full text of the proposal: the texts of the round's turns, in order (code blocks included). */
  text: string;
  /** Its final answer (`extractAnswer`), or null. */
  answer: string | null;
  /** 0-based round that proposed it. */
  round: number;
  /** The round's reasoner episode (its turns with the tools' responses), when the loop ran one. */
  episode?: Trajectory;
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

/** Options of {@link referenceVerifier}. */
export interface ReferenceVerifierOptions {
  /** Scores the candidate's answer against the task's gold answer(s), in [0, 1]. Default `mathReward`. */
  reward?: RewardFunction;
  /** Lowest score that passes. Default 1. */
  passThreshold?: number;
  /** Name in the trajectory. Default 'reference'. */
  name?: string;
}

/**
 * A verifier that compares the candidate's answer with the task's gold answer(s) by
 * `reward(answer, task, episode)` (the round's episode, so a reward may read its tool
 * results): the score is the reward, and the critique says whether the answer is right, as
 * AlphaApollo's evolving loop scores each policy answer against the ground truth
 * (`compute_answer_correctness`, evolving_main.py, commit 712a04dc). For training on problems
 * with reference answers; a task without a gold answer scores 0.
 */
export function referenceVerifier(options: ReferenceVerifierOptions = {}): Verifier {
  checkObject('options', options);
  const reward = functionOption<RewardFunction>('options.reward', options.reward) ?? mathReward;
  const name = stringOption('options.name', options.name) ?? 'reference';
  const passThreshold = options.passThreshold ?? 1;
  if (typeof passThreshold !== 'number' || !Number.isFinite(passThreshold)) throw rangeError('options.passThreshold', 'a finite number', passThreshold);
  return {
    name,
    async verify(candidate, task) {
      const episode = candidate.episode ?? { id: 'candidate', prompt: task.prompt, turns: [{ action: { text: candidate.text } }] };
      const score = task.gold === undefined ? 0 : checkFiniteNumber('reward(answer, task, episode)', reward(candidate.answer, task, episode));
      const passed = score >= passThreshold;
      const critique = candidate.answer === null ? 'The solution gives no final answer.'
        : `The answer ${candidate.answer} is ${passed ? 'correct' : 'wrong'}.`;
      return { score, passed, status: 'success', critique };
    },
  };
}

/** Options of {@link majorityVerifier}. */
export interface MajorityVerifierOptions {
  /** Verifications per candidate (an odd number avoids ties). Default 3. */
  samples?: number;
  /** Name in the trajectory. Default: the verifier's. */
  name?: string;
}

/**
 * AlphaApollo's verifier ensemble (`aggregate_verifier_judgments`, evolving_main.py, commit
 * 712a04dc): `verifier` (a sampled judge, say) judges the candidate `samples` times and the
 * majority decides whether it passes (a tie goes to the judgement seen first, as Python's
 * `Counter.most_common` orders it). The score is the mean score of the verdicts of the
 * majority, the critique and status those of its first verdict (AlphaApollo's report without
 * an aggregating model).
 */
export function majorityVerifier(verifier: Verifier, options: MajorityVerifierOptions = {}): Verifier {
  const inner = checkVerifier('verifier', verifier);
  checkObject('options', options);
  const samples = positiveOption('options.samples', options.samples, 3);
  const name = stringOption('options.name', options.name) ?? inner.name;
  return {
    name,
    async verify(candidate, task) {
      const verdicts: Verdict[] = [];
      for (let i = 0; i < samples; i++) verdicts.push(await inner.verify(candidate, task));
      const passes = verdicts.filter((verdict) => verdict.passed === true).length;
      const fails = samples - passes;
      const passed = passes === fails ? verdicts[0]!.passed === true : passes > fails;
      const majority = verdicts.filter((verdict) => (verdict.passed === true) === passed);
      const score = majority.reduce((sum, verdict) => sum + checkFiniteNumber('verdict.score', verdict.score), 0) / majority.length;
      return { score, passed, status: majority[0]!.status, critique: majority[0]!.critique };
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
  /** Characters of the proposal's text: AlphaApollo's memory prefers shorter solutions among equals. */
  length: number;
  /** Id of the round's reasoner episode. */
  episodeId: string;
}

/**
 * Which earlier rounds a refinement prompt remembers:
 * - 'ranked' (AlphaApollo's `NDimensionalMemory`, `alphaapollo/core/environments/memory/memory.py`,
 *   commit 712a04dc): each round is ranked by score (higher first) and by length (shorter
 *   first), equal values sharing a rank; rounds are ordered by the sum of their two ranks,
 *   earlier rounds first on ties, and the first `memorySize` are kept;
 * - 'recent': the `memorySize` most recent rounds, oldest first.
 */
export type MemoryStrategy = 'ranked' | 'recent';

/** Dense ranks of `values` (0 for the best; equal values share a rank), best = highest. */
function denseRanks(values: readonly number[]): number[] {
  const distinct = [...new Set(values)].sort((a, b) => b - a);
  return values.map((value) => distinct.indexOf(value));
}

/** The remembered rounds among `earlier` (all rounds before the latest), per `strategy`. */
export function selectMemory(earlier: readonly RoundRecord[], memorySize: number, strategy: MemoryStrategy): RoundRecord[] {
  if (memorySize <= 0 || earlier.length === 0) return [];
  if (strategy === 'recent') return earlier.slice(Math.max(0, earlier.length - memorySize));
  const byScore = denseRanks(earlier.map((record) => record.score));
  const byLength = denseRanks(earlier.map((record) => -record.length));
  return earlier
    .map((record, i) => ({ record, rank: byScore[i]! + byLength[i]!, i }))
    .sort((a, b) => a.rank - b.rank || a.i - b.i)
    .slice(0, memorySize)
    .map(({ record }) => record);
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
 * critique; in the memory's order), then the latest attempt in full with its critique, and a
 * request to improve.
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
  'Solve the problem step by step. In each turn you may reason, call one tool (or write one ```python code block, which is run ' +
  'and its output shown to you), and read the result. Include a ```python block that checks your result with assertions, and ' +
  'give the final answer as \\boxed{answer}.';

/**
 * Options of {@link ProposeJudgeUpdate}. The reasoner's options (`tools`, `codeTool`,
 * `codeFence`, `reasoningTurns` and any other of `MultiTurnReasonerOptions` but `maxTurns` and
 * `reward`) are passed to the reasoner each round runs.
 */
export interface ProposeJudgeUpdateOptions extends Omit<MultiTurnReasonerOptions, 'maxTurns' | 'reward' | 'system'> {
  /** The proposer. */
  policy: AgentPolicy;
  /** Judges each proposal, e.g. `toolVerifier({ tools })`, `judgeVerifier({ policy })` or `referenceVerifier()`. */
  verifier: Verifier;
  /** Most rounds (proposals). Default 3. */
  maxRounds?: number;
  /**
   * Most turns of the reasoner in one round (policy calls: reasoning, tool calls, the answer).
   * Default 3, AlphaApollo's `max_steps` (`informal_math_evolving/env.py`, commit 712a04dc).
   */
  maxTurnsPerRound?: number;
  /** Earlier rounds remembered in a refinement prompt besides the latest (0 for none). Default 3. */
  memorySize?: number;
  /** Which earlier rounds are remembered. Default 'ranked' (AlphaApollo's). */
  memory?: MemoryStrategy;
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

/** What {@link ProposeJudgeUpdate.runRounds} returns. */
export interface ProposeJudgeUpdateResult {
  /** The loop's summary trajectory (what {@link ProposeJudgeUpdate.run} returns). */
  trajectory: Trajectory;
  /**
   * Each round's reasoner episode, in order: the trainable sequences (prompt: the round's
   * user message; turns: reasoning, tool calls with their responses, the answer; token ids
   * when the policy reports them). Its `reward` is the round's verified score, its
   * `metadata.verdict` the verdict, its `groupId` the task's (else the summary's id), so the
   * rounds of a task are compared in one group.
   */
  episodes: Trajectory[];
}

/**
 * Runs propose → verify → refine rounds. Each round runs the multi-turn tool-using reasoner
 * (`MultiTurnReasoner`, with this loop's policy, tools, system prompt and
 * `maxTurnsPerRound`): round 0 from the task alone, each later round from one user message
 * holding the task, the memory of earlier rounds (`memory`, `memorySize`) and the latest
 * proposal with its critique ({@link RefinePrompt}), not the whole history, so the context
 * stays bounded however many rounds run (AlphaApollo's rounds restart the environment with
 * the remembered solutions and their verifier feedback in the prompt).
 *
 * The summary trajectory holds one turn per round: the proposal (the round's text, see
 * {@link Candidate}) as the action and its verification as the response (tool name: the
 * verifier's name; status: how the verification ran; text: the critique). Each proposal was
 * generated from the prompt in `metadata.rounds[k].prompt`. `metadata.best` is the round
 * kept (highest score, the earliest on ties), `metadata.answer` its answer and
 * `metadata.bestScore` its verified score. The reward is the kept answer's against the gold
 * when the task has one, else the best verified score. The rounds' own episodes, trainable
 * as they are, come from {@link ProposeJudgeUpdate.runRounds}.
 */
export class ProposeJudgeUpdate {
  readonly #reasoner: MultiTurnReasoner;
  readonly #verifier: Verifier;
  readonly #maxRounds: number;
  readonly #memorySize: number;
  readonly #memory: MemoryStrategy;
  readonly #stopWhenPassed: boolean;
  readonly #system: string;
  readonly #refinePrompt: RefinePrompt;
  readonly #reward: RewardFunction;

  /** @throws TypeError/RangeError naming the bad option. */
  constructor(options: ProposeJudgeUpdateOptions) {
    checkObject('options', options);
    const policy = checkPolicy('options.policy', options.policy);
    this.#verifier = checkVerifier('options.verifier', options.verifier);
    this.#maxRounds = positiveOption('options.maxRounds', options.maxRounds, 3);
    this.#memorySize = nonNegativeOption('options.memorySize', options.memorySize, 3);
    const memory = options.memory ?? 'ranked';
    if (memory !== 'ranked' && memory !== 'recent') throw rangeError('options.memory', "'ranked' or 'recent'", memory);
    this.#memory = memory;
    if (options.stopWhenPassed !== undefined && typeof options.stopWhenPassed !== 'boolean') {
      throw typeError('options.stopWhenPassed', 'a boolean', options.stopWhenPassed);
    }
    this.#stopWhenPassed = options.stopWhenPassed ?? true;
    this.#system = stringOption('options.system', options.system) ?? PROPOSER_SYSTEM_PROMPT;
    this.#refinePrompt = functionOption<RefinePrompt>('options.refinePrompt', options.refinePrompt) ?? defaultRefinePrompt;
    this.#reward = functionOption<RewardFunction>('options.reward', options.reward) ?? mathReward;
    const {
      verifier: _verifier, maxRounds: _maxRounds, maxTurnsPerRound, memorySize: _memorySize, memory: _memory,
      stopWhenPassed: _stopWhenPassed, system: _system, refinePrompt: _refinePrompt, reward: _reward, ...reasonerOptions
    } = options;
    this.#reasoner = new MultiTurnReasoner({
      ...reasonerOptions, policy, system: this.#system, maxTurns: positiveOption('options.maxTurnsPerRound', maxTurnsPerRound, 3),
    });
  }

  /** Runs the rounds for one task; returns the summary trajectory (see the class description). */
  async run(task: AgentTask): Promise<Trajectory> {
    return (await this.runRounds(task)).trajectory;
  }

  /** Runs the rounds for one task; returns the summary trajectory and each round's reasoner episode. */
  async runRounds(task: AgentTask): Promise<ProposeJudgeUpdateResult> {
    checkTask(task);
    const trajectory = startTrajectory(task, 'propose-judge-update', this.#system);
    const rounds: RoundRecord[] = [];
    const episodes: Trajectory[] = [];
    let prompt = task.prompt;
    let best = -1;
    for (let round = 0; round < this.#maxRounds; round++) {
      const roundTask: AgentTask = { prompt, id: `${trajectory.id}/round${round}`, groupId: task.groupId ?? trajectory.id };
      if (task.metadata !== undefined) roundTask.metadata = task.metadata;
      const episode = await this.#reasoner.run(roundTask);
      const text = episode.turns.map((turn) => turn.action.text).join('\n\n');
      const answer = episode.metadata!.answer as string | null;
      const candidate: Candidate = { text, answer, round, episode };
      const verdict = await this.#verifier.verify(candidate, task);
      checkObject('verdict', verdict);
      const score = checkFiniteNumber('verdict.score', verdict.score);
      const critique = checkString('verdict.critique', verdict.critique);
      if (!TOOL_STATUSES.includes(verdict.status)) throw typeError('verdict.status', "'success', 'error' or 'timeout'", verdict.status);
      const record: RoundRecord = { round, prompt, answer, score, passed: verdict.passed === true, critique, length: text.length, episodeId: episode.id };
      rounds.push(record);
      episode.reward = score;
      episode.metadata!.verdict = { score, passed: record.passed, status: verdict.status, critique };
      episode.metadata!.round = round;
      episodes.push(episode);
      trajectory.turns.push({ action: { text }, response: { toolName: this.#verifier.name, status: verdict.status, text: critique } });
      if (best < 0 || score > rounds[best]!.score) best = round;
      if ((record.passed && this.#stopWhenPassed) || round + 1 === this.#maxRounds) break;
      const memory = selectMemory(rounds.slice(0, round), this.#memorySize, this.#memory);
      prompt = checkString('refinePrompt(task, latest, memory)', this.#refinePrompt(task, { ...record, text }, memory));
    }
    if (episodes[best]!.truncated === true) trajectory.truncated = true;
    trajectory.metadata!.rounds = structuredClone(rounds);
    trajectory.metadata!.best = best;
    trajectory.metadata!.bestScore = rounds[best]!.score;
    finishTrajectory(trajectory, task, rounds[best]!.answer, this.#reward);
    if (task.gold === undefined) trajectory.reward = rounds[best]!.score;
    return { trajectory, episodes };
  }
}
