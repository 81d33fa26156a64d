/**
 * AceSearcher's decomposer–solver: one model splits a multi-hop question into `###`
 * sub-questions that refer to earlier answers as `#k`, answers each from documents retrieved
 * for it within a fixed budget, then answers the question from its intermediate answers.
 */
import { extractAnswer } from '../rewards/extract.js';
import { qaReward } from '../rewards/episode.js';
import { toChatMessages, USER_FEEDBACK_TOOL } from '../trajectory/chat.js';
import type { Action, Trajectory, Turn } from '../trajectory/model.js';
import type { Decomposition, PreferenceQuestion } from '../preferences/pairs.js';
import { checkTask, finishTrajectory, startTrajectory, takeGeneration, type AgentTask, type RewardFunction } from './common.js';
import { checkPolicy, ScriptedPolicy, type AgentPolicy } from './agent_policy.js';
import type { MultiHopQuestion, ReferenceStep } from './data/questions.js';
import type { RetrievedDocument, Retriever } from './retrieval.js';
import { checkArray, checkNonNegativeInteger, checkObject, checkPositiveInteger, checkString, functionOption, positiveOption, rangeError, stringOption, typeError } from '../check.js';

/**
 * The sub-questions of a decomposition: the text after each `marker` (default `###`, up to
 * the next one), trimmed, with a leading label such as "Q1:" or "1." removed; empty ones are
 * dropped.
 */
export function parseSubquestions(decomposition: string, marker = SUBQUESTION_MARKER): string[] {
  checkString('decomposition', decomposition);
  checkString('marker', marker);
  if (marker === '') throw rangeError('marker', 'a non-empty string', marker);
  return decomposition.split(marker).slice(1)
    .map((part) => part.trim().replace(/^(?:Q(?:uestion)?\s*)?\d+\s*[:.)]\s*/i, '').trim())
    .filter((part) => part !== '');
}

/**
 * Replaces each `#k` in `subquestion` by `answers[k - 1]`, the answer of the k-th
 * sub-question (1-based). References to a sub-question not yet answered (k = 0 or beyond
 * `answers`) are left as written.
 */
export function resolveReferences(subquestion: string, answers: readonly string[]): string {
  checkString('subquestion', subquestion);
  checkArray('answers', answers);
  return subquestion.replace(/#(\d+)/g, (reference, digits: string) => {
    const k = Number(digits);
    return k >= 1 && k <= answers.length ? answers[k - 1]! : reference;
  });
}

/**
 * Splits a budget of `budget` documents across `count` sub-questions: each gets
 * floor(budget / count), and the first (budget mod count) get one more — earlier hops get
 * the extra documents, since every later hop builds on their answers. Sums to `budget`.
 * @throws TypeError/RangeError unless both are non-negative integers and count > 0.
 */
export function splitDocumentBudget(budget: number, count: number): number[] {
  checkNonNegativeInteger('budget', budget);
  checkPositiveInteger('count', count);
  const base = Math.floor(budget / count);
  const extra = budget % count;
  return Array.from({ length: count }, (_, k) => base + (k < extra ? 1 : 0));
}

/** The prompts of the three stages. */
export interface DecomposerPrompts {
  /** The user message asking for the decomposition of `question`. */
  decompose(question: string): string;
  /** The message that gives sub-question `index` (0-based), with references resolved, and its documents. */
  subquestion(index: number, subquestion: string, documents: readonly RetrievedDocument[]): string;
  /** The message asking for the final answer to `question`. */
  final(question: string): string;
}

/** Default prompts, in AceSearcher's layout. */
export const DEFAULT_DECOMPOSER_PROMPTS: DecomposerPrompts = Object.freeze({
  decompose(question: string): string {
    return 'Break the question into simple sub-questions that can each be answered from one document. Write each on ' +
      'its own line starting with ###, and refer to the answer of an earlier sub-question k as #k.\n' +
      `Question: ${question}`;
  },
  subquestion(index: number, subquestion: string, documents: readonly RetrievedDocument[]): string {
    const lines = documents.length === 0
      ? ['No documents.']
      : documents.map((document, i) => `[${i + 1}] ${document.title}: ${document.text}`);
    return `Documents:\n${lines.join('\n')}\n\nSub-question ${index + 1}: ${subquestion}\n` +
      'Answer it in a few words, as \\boxed{answer}.';
  },
  final(question: string): string {
    return `Now answer the original question from the answers above.\nQuestion: ${question}\nGive the final answer as \\boxed{answer}.`;
  },
});

/** AceSearcher's sub-question marker (its prompts: "Mark each sub-question with ### at the beginning"). */
export const SUBQUESTION_MARKER = '###';

/** AceSearcher's document budget per question (see {@link DecomposerSolverOptions.documentBudget}). */
export const DEFAULT_DOCUMENT_BUDGET = 15;

/** Options of {@link DecomposerSolver}. */
export interface DecomposerSolverOptions {
  /** The model, playing decomposer and solver. */
  policy: AgentPolicy;
  /** Where documents come from, e.g. `new Bm25Retriever(BUILTIN_CORPUS)`. */
  retriever: Retriever;
  /**
   * Documents retrieved per question, split across its sub-questions ({@link splitDocumentBudget}).
   * Default 15, AceSearcher's: 5 passages per sub-question for questions of up to 3 hops
   * (`passages[:5] if len(sub_questions) <= 3 else passages[:3]`, `inference/main_qa.py`,
   * ritaranx/AceSearcher commit 16a9b3c3), which 15 split over 3 sub-questions gives.
   */
  documentBudget?: number;
  /** Most sub-questions used; later ones are dropped (`metadata.droppedSubquestions`). Default 5. */
  maxSubquestions?: number;
  /** System prompt; none by default. */
  system?: string;
  /** Prompt overrides; the rest stay {@link DEFAULT_DECOMPOSER_PROMPTS}. */
  prompts?: Partial<DecomposerPrompts>;
  /** Reward of an episode whose task has a gold answer. Default {@link qaReward}. */
  reward?: RewardFunction;
  /** What starts a sub-question in the decomposition. Default {@link SUBQUESTION_MARKER} (`###`). */
  subquestionMarker?: string;
  /**
   * Reads the answer a turn gives (a sub-answer, the final answer). Default: its `\boxed{}`
   * (or other extractable) answer, else its last non-empty line.
   */
  answer?: (text: string) => string;
}

/** The answer written in a turn: its `\boxed{}` (or other extractable) answer, else its last non-empty line. */
function defaultAnswerOf(text: string): string {
  const extracted = extractAnswer(text);
  if (extracted !== null) return extracted;
  const lines = text.split('\n').map((line) => line.trim()).filter((line) => line !== '');
  return lines.at(-1) ?? '';
}

/**
 * Runs AceSearcher episodes as one conversation that the trajectory holds exactly:
 * - turn 0: the decomposition (prompt: {@link DecomposerPrompts.decompose} of the question);
 * - turn k (1..n): the answer to sub-question k, written after the response to turn k − 1,
 *   which gives sub-question k with its `#j` references replaced by earlier answers and the
 *   documents retrieved for it (tool name 'retrieve');
 * - turn n + 1: the final answer, asked for by a user message after turn n.
 * A decomposition without `###` sub-questions is answered as one sub-question: the question.
 * `metadata` holds `question`, `subquestions` (as written), `resolvedSubquestions`,
 * `documentIds` (per sub-question), `allocation` (documents per sub-question),
 * `intermediateAnswers`, `droppedSubquestions` and `answer`. An answer cut off by the
 * policy's length limit ends the episode as `truncated`.
 */
export class DecomposerSolver {
  readonly #policy: AgentPolicy;
  readonly #retriever: Retriever;
  readonly #documentBudget: number;
  readonly #maxSubquestions: number;
  readonly #system: string | undefined;
  readonly #prompts: DecomposerPrompts;
  readonly #reward: RewardFunction;
  readonly #marker: string;
  readonly #answerOf: (text: string) => string;

  /** @throws TypeError/RangeError naming the bad option. */
  constructor(options: DecomposerSolverOptions) {
    checkObject('options', options);
    this.#policy = checkPolicy('options.policy', options.policy);
    const retriever = options.retriever;
    if (retriever === null || typeof retriever !== 'object' || typeof retriever.search !== 'function') {
      throw typeError('options.retriever', 'a retriever (an object with a search(query, limit) method)', retriever);
    }
    this.#retriever = retriever;
    this.#documentBudget = options.documentBudget === undefined ? DEFAULT_DOCUMENT_BUDGET : checkNonNegativeInteger('options.documentBudget', options.documentBudget);
    this.#maxSubquestions = positiveOption('options.maxSubquestions', options.maxSubquestions, 5);
    this.#system = stringOption('options.system', options.system);
    const overrides = options.prompts === undefined ? {} : checkObject('options.prompts', options.prompts);
    for (const [name, value] of Object.entries(overrides)) {
      if (!(name in DEFAULT_DECOMPOSER_PROMPTS)) throw typeError(`options.prompts.${name}`, 'no such prompt (decompose, subquestion or final)', value);
      functionOption(`options.prompts.${name}`, value);
    }
    this.#prompts = { ...DEFAULT_DECOMPOSER_PROMPTS, ...overrides };
    this.#reward = functionOption<RewardFunction>('options.reward', options.reward) ?? qaReward;
    this.#marker = stringOption('options.subquestionMarker', options.subquestionMarker) ?? SUBQUESTION_MARKER;
    if (this.#marker === '') throw rangeError('options.subquestionMarker', 'a non-empty string', this.#marker);
    const answer = functionOption<(text: string) => string>('options.answer', options.answer);
    this.#answerOf = answer === undefined ? defaultAnswerOf : (text) => checkString('answer(text)', answer(text));
  }

  /**
   * Answers one question; see the class description for what the trajectory holds.
   * @param options.decomposition a decomposition sampled earlier (its text, and its token ids
   * and log-probs when known), used as turn 0 instead of generating one: AceSearcher samples
   * several solutions under each decomposition (see {@link decomposerPreferenceQuestion}).
   * @param options.promptTokenIds the context ids the given decomposition was sampled from
   * (its episode's `promptTokenIds`), so that this episode's token record is complete too.
   */
  async run(task: AgentTask, options: { decomposition?: Action; promptTokenIds?: readonly number[] } = {}): Promise<Trajectory> {
    checkTask(task);
    checkObject('options', options);
    const question = task.prompt;
    const trajectory = startTrajectory(task, 'decomposer-solver', this.#system);
    trajectory.prompt = checkString('prompts.decompose(question)', this.#prompts.decompose(question));
    const metadata = trajectory.metadata!;
    metadata.question = question;
    metadata.subquestionMarker = this.#marker;
    let last: Turn | undefined;
    if (options.decomposition === undefined) {
      last = await this.#turn(trajectory);
      if (last === undefined) return finishTrajectory(trajectory, task, null, this.#reward);
    } else {
      checkString('options.decomposition.text', checkObject('options.decomposition', options.decomposition).text);
      last = { action: structuredClone(options.decomposition) };
      if (options.promptTokenIds !== undefined) {
        const ids = checkArray('options.promptTokenIds', options.promptTokenIds);
        if (!ids.every((id) => Number.isInteger(id) && (id as number) >= 0)) throw typeError('options.promptTokenIds', 'an array of token ids', options.promptTokenIds);
        trajectory.promptTokenIds = ids.slice() as number[];
      }
      trajectory.turns.push(last);
    }
    const written = parseSubquestions(last.action.text, this.#marker);
    const subquestions = (written.length === 0 ? [question] : written).slice(0, this.#maxSubquestions);
    const allocation = splitDocumentBudget(this.#documentBudget, subquestions.length);
    const resolved: string[] = [];
    const documentIds: string[][] = [];
    const answers: string[] = [];
    Object.assign(metadata, {
      subquestions: written, resolvedSubquestions: resolved, documentIds, allocation, intermediateAnswers: answers,
      droppedSubquestions: Math.max(0, written.length - subquestions.length),
    });
    for (let k = 0; k < subquestions.length; k++) {
      const subquestion = resolveReferences(subquestions[k]!, answers);
      const limit = allocation[k]!;
      const documents = limit === 0 ? [] : await this.#retriever.search(subquestion, limit);
      checkArray('retriever.search(query, limit)', documents);
      resolved.push(subquestion);
      documentIds.push(documents.map((document) => document.id));
      last.response = {
        toolName: 'retrieve', status: 'success',
        text: checkString('prompts.subquestion(index, subquestion, documents)', this.#prompts.subquestion(k, subquestion, documents)),
      };
      last = await this.#turn(trajectory);
      if (last === undefined) return finishTrajectory(trajectory, task, null, this.#reward);
      answers.push(this.#answerOf(last.action.text));
    }
    last.response = { toolName: USER_FEEDBACK_TOOL, status: 'success', text: checkString('prompts.final(question)', this.#prompts.final(question)) };
    last = await this.#turn(trajectory);
    return finishTrajectory(trajectory, task, last === undefined ? null : this.#answerOf(last.action.text), this.#reward);
  }

  /** Generates the next turn from the trajectory so far; undefined (and `truncated`) when it was cut off. */
  async #turn(trajectory: Trajectory): Promise<Turn | undefined> {
    const { finishReason, action } = takeGeneration(trajectory, await this.#policy.generate(toChatMessages(trajectory)));
    const turn: Turn = { action };
    trajectory.turns.push(turn);
    if (finishReason !== 'length') return turn;
    trajectory.truncated = true;
    return undefined;
  }
}

/**
 * Gathers decomposer–solver episodes of one question into the SDK's `PreferenceQuestion`,
 * ready for `buildPreferencePairs` (AceSearcher's decomposition, intermediate and final
 * pairs). Episodes are grouped by their decomposition (the text of turn 0), in order of first
 * appearance; each episode is one solution of its group: its last turn's text, its
 * intermediate answers, its reward and the episode itself, so that the pairs carry the
 * contexts the solver saw (the documents retrieved for each sub-question and the earlier
 * answers) and the turns as generated, token ids included. Sub-questions are those written in
 * the decomposition.
 * @param id the question's id in the pairs.
 * @throws TypeError naming the episode that is not a decomposer–solver episode of the same
 * question, or that has no reward; RangeError for an empty list.
 */
export function decomposerPreferenceQuestion(id: string, trajectories: readonly Trajectory[]): PreferenceQuestion {
  checkString('id', id);
  checkArray('trajectories', trajectories);
  if (trajectories.length === 0) throw rangeError('trajectories', 'at least one episode', trajectories);
  const groups = new Map<string, Decomposition>();
  let question: string | undefined;
  trajectories.forEach((trajectory, i) => {
    const name = `trajectories[${i}]`;
    checkObject(name, trajectory);
    const metadata = trajectory.metadata;
    if (metadata?.agent !== 'decomposer-solver' || typeof metadata.question !== 'string' || trajectory.turns.length === 0) {
      throw typeError(name, 'an episode of DecomposerSolver', trajectory);
    }
    question ??= metadata.question;
    if (metadata.question !== question) throw typeError(`${name}.metadata.question`, JSON.stringify(question), metadata.question);
    if (typeof trajectory.reward !== 'number') throw typeError(`${name}.reward`, 'a reward (run the task with a gold answer)', trajectory.reward);
    const text = trajectory.turns[0]!.action.text;
    let group = groups.get(text);
    if (group === undefined) {
      const marker = typeof metadata.subquestionMarker === 'string' && metadata.subquestionMarker !== '' ? metadata.subquestionMarker : SUBQUESTION_MARKER;
      const written = parseSubquestions(text, marker);
      group = { text, subQuestions: written.length === 0 ? [question] : written, solutions: [] };
      groups.set(text, group);
    }
    const answers = metadata.intermediateAnswers;
    group.solutions.push({
      text: trajectory.turns.at(-1)!.action.text,
      intermediateAnswers: Array.isArray(answers) ? answers.map(String) : [],
      reward: trajectory.reward,
      trajectory,
    });
  });
  return { id, question: question!, decompositions: [...groups.values()] };
}

/** How {@link decomposerReferenceEpisodes} writes a reference solution as the model's turns. */
export interface ReferenceFormat {
  /** The decomposition turn. Default: one `### Qk: <sub-question>` line per step (the `subquestionMarker` given, else `###`). */
  decomposition(steps: readonly ReferenceStep[]): string;
  /** The turn answering a sub-question. Default `\boxed{answer}`. */
  answer(answer: string, step: number): string;
  /** The final turn. Default `So the answer is \boxed{answer}.` */
  final(answer: string): string;
}

/**
 * AceSearcher's supervised first stage, its data: each question's reference solution (its
 * reference decomposition, the reference answer of every step, the gold answer) written as
 * the turns of a `DecomposerSolver` episode, in the very conversation the solver holds — the
 * decomposition prompt, the documents the retriever gives each resolved sub-question within
 * the budget, the final prompt — so that supervised fine-tuning on their action tokens
 * (`SFTTrainer` on `packTrajectories` of them) teaches the model the decomposer's and the
 * solver's roles in the format it is then trained in by iterative DPO. The episodes are run
 * with the solver's options (retriever, budget, prompts, marker, reward); each is rewarded
 * like any episode (`reward` 1 when the written answer is scored right).
 */
export async function decomposerReferenceEpisodes(
  questions: readonly MultiHopQuestion[],
  options: Omit<DecomposerSolverOptions, 'policy'> & { format?: Partial<ReferenceFormat> },
): Promise<Trajectory[]> {
  checkArray('questions', questions);
  checkObject('options', options);
  const { format: overrides = {}, ...solverOptions } = options;
  checkObject('options.format', overrides);
  const marker = solverOptions.subquestionMarker ?? SUBQUESTION_MARKER;
  const format: ReferenceFormat = {
    decomposition: (steps) => steps.map((step, k) => `${marker} Q${k + 1}: ${step.question}`).join('\n'),
    answer: (answer) => `\\boxed{${answer}}`,
    final: (answer) => `So the answer is \\boxed{${answer}}.`,
    ...overrides,
  };
  const episodes: Trajectory[] = [];
  for (const [i, question] of questions.entries()) {
    checkObject(`questions[${i}]`, question);
    const steps = checkArray(`questions[${i}].steps`, question.steps) as readonly ReferenceStep[];
    const answers = checkArray(`questions[${i}].answers`, question.answers) as readonly string[];
    if (answers.length === 0) throw rangeError(`questions[${i}].answers`, 'at least one gold answer', answers);
    const teacher = new ScriptedPolicy([
      checkString('format.decomposition(steps)', format.decomposition(steps)),
      ...steps.map((step, k) => checkString('format.answer(answer, step)', format.answer(step.answer, k))),
      checkString('format.final(answer)', format.final(answers[0]!)),
    ]);
    const solver = new DecomposerSolver({ ...solverOptions, policy: teacher });
    episodes.push(await solver.run({ id: question.id, prompt: question.question, gold: answers }));
  }
  return episodes;
}
