/**
 * AlphaApollo's and AceSearcher's loops in the served demo model's format: the model that
 * `tirl serve` serves (the demo's GRU, trained by the harness in `app/serve/trained_server.ts`)
 * reads and writes only its small vocabulary (numbers, a few words, `<calc> … </calc>` code and
 * `<ans> … </ans>` answers), so the prompts, the corpus and the answer format of each method
 * are written in it here. The loops, rewards, pairs and trainers are tirl's own, unchanged;
 * only what the model reads and writes is the demo's. `examples/alphaapollo.ts`,
 * `examples/acesearcher.ts` and `test/served_alphaapollo_acesearcher.test.ts` use these.
 */
import {
  Bm25Retriever,
  ProposeJudgeUpdate,
  referenceVerifier,
  type AgentPolicy,
  type AgentTask,
  type CorpusDocument,
  type DecomposerPrompts,
  type DecomposerSolverOptions,
  type MultiHopQuestion,
  type ReferenceFormat,
  type RefinePrompt,
  type Trajectory,
} from '../lib/index.js';
import { calculatorSession, DEMO_CODE_MARKUP, demoAnswer, demoReward } from '../app/demo/agent_format.js';

/** Facts the solver retrieves, in the demo's words (one per passage). */
export const DEMO_CORPUS: readonly CorpusDocument[] = Object.freeze([
  { id: 'box', title: 'box', text: 'a box holds 12 items' },
  { id: 'km', title: 'km', text: 'a km is 1000 m' },
  { id: 'kg', title: 'kg', text: 'a kg is 1000 g' },
  { id: 'minutes', title: 'minutes', text: 'a minutes is 60 seconds' },
  { id: 'hours', title: 'hours', text: 'a hours is 60 minutes' },
]);

/** Two-hop questions over {@link DEMO_CORPUS}: look a quantity up, then compute with it. */
export const DEMO_QUESTIONS: readonly MultiHopQuestion[] = Object.freeze([
  ['q1', 'how many items in 3 boxes ?', 'how many items a box holds ?', 'box', '12', 3],
  ['q2', 'how many m in 4 km ?', 'how many m in a km ?', 'km', '1000', 4],
  ['q3', 'how many g in 2 kg ?', 'how many g in a kg ?', 'kg', '1000', 2],
  ['q4', 'how many seconds in 5 minutes ?', 'how many seconds in a minutes ?', 'minutes', '60', 5],
  ['q5', 'how many minutes in 7 hours ?', 'how many minutes in a hours ?', 'hours', '60', 7],
  ['q6', 'how many items in 6 boxes ?', 'how many items a box holds ?', 'box', '12', 6],
].map(([id, question, lookup, supportingId, fact, factor]) => ({
  id: id as string,
  question: question as string,
  answers: [String(Number(fact) * (factor as number))],
  steps: [
    { question: lookup as string, answer: fact as string, supportingId: supportingId as string },
    { question: `what is #1 times ${factor} ?`, answer: String(Number(fact) * (factor as number)), supportingId: supportingId as string },
  ],
})));

/** The answer a demo turn gives: inside `<ans> … </ans>`, else its text (trimmed). */
export function demoTurnAnswer(text: string): string {
  return (demoAnswer(text) ?? text).trim();
}

/**
 * AceSearcher's reward in the demo's format, EM × format: 1 when the last turn writes its
 * answer as `<ans> … </ans>` and that answer is a gold answer.
 */
export function demoQaReward(answer: string | null, task: AgentTask, trajectory: Trajectory): number {
  const last = trajectory.turns.at(-1)?.action.text ?? '';
  if (answer === null || demoAnswer(last) === null) return 0;
  const golds = typeof task.gold === 'string' ? [task.gold] : task.gold ?? [];
  return golds.includes(answer) ? 1 : 0;
}

/**
 * The decomposer–solver's three prompts in the demo's words: the question, the passages then
 * the sub-question (without the `</ans>` that closes the plan: the demo model's turns end at
 * `</ans>` or `</calc>`), the question again.
 */
export const DEMO_DECOMPOSER_PROMPTS: DecomposerPrompts = Object.freeze({
  decompose: (question: string) => question,
  subquestion: (_index: number, subquestion: string, documents: readonly { text: string }[]) =>
    [...documents.map((document) => `${document.text} .`), subquestion.replace('</ans>', '').trim()].join(' '),
  final: (question: string) => question,
});

/** The decomposer–solver's options for the demo model: its corpus, prompts, marker (`then`), answers and reward. */
export function demoSolverOptions(): Omit<DecomposerSolverOptions, 'policy'> {
  return {
    retriever: new Bm25Retriever(DEMO_CORPUS),
    documentBudget: 2,
    prompts: DEMO_DECOMPOSER_PROMPTS,
    subquestionMarker: 'then',
    answer: demoTurnAnswer,
    reward: demoQaReward,
  };
}

/**
 * Reference solutions written as the demo model writes: `then`-marked sub-questions closed by
 * `</ans>` (where the demo model's turn stops), `<ans>` answers.
 */
export const DEMO_REFERENCE_FORMAT: Partial<ReferenceFormat> = Object.freeze({
  decomposition: (steps: readonly { question: string }[]) => `${steps.map((step) => `then ${step.question}`).join(' ')} </ans>`,
  answer: (answer: string) => `<ans> ${answer} </ans>`,
  final: (answer: string) => `<ans> ${answer} </ans>`,
});

/**
 * AlphaApollo's refinement prompt in the demo's words: the question, then each remembered
 * attempt and the latest as its answer and its verdict (`<ans> a </ans> <out> 1 </out>` when
 * the verifier passed it, `0` when not), as AlphaApollo's prompt lists the previous solutions
 * with their verification feedback.
 */
export const demoRefinePrompt: RefinePrompt = (task, latest, memory) =>
  [task.prompt, ...[...memory, latest].map((round) => `<ans> ${round.answer ?? ''} </ans> <out> ${round.passed ? 1 : 0} </out>`)].join(' ');

/**
 * AlphaApollo's loop for the demo model: 2 rounds of up to 3 reasoner turns (its `<calc>`
 * code run by the episode's calculator session), every round kept (`stopWhenPassed` false, so
 * a task gives 2 episodes), scored against the reference, 2 earlier rounds remembered.
 */
export function demoProposeJudgeUpdate(policy: AgentPolicy): ProposeJudgeUpdate {
  return new ProposeJudgeUpdate({
    policy,
    verifier: referenceVerifier({ reward: demoReward, name: 'verifier' }),
    maxRounds: 2, stopWhenPassed: false, maxTurnsPerRound: 3, memorySize: 2,
    codeMarkup: DEMO_CODE_MARKUP, codeSession: calculatorSession, answer: demoAnswer,
    refinePrompt: demoRefinePrompt,
  });
}
