/**
 * AceSearcher's decomposer–solver on the built-in corpus and questions, offline.
 *
 * The policy is scripted: it decomposes each question as its reference decomposition does,
 * and, like a reader, answers a sub-question only when the answer appears in the documents
 * it was given — so the score depends on what BM25 retrieved within the document budget.
 *
 * Run: npx tsc -p tsconfig.json && node dist/examples/agents/decomposer_solver.js [documentBudget]
 */
import {
  BUILTIN_CORPUS, BUILTIN_QUESTIONS, Bm25Retriever, DEFAULT_DOCUMENT_BUDGET, DecomposerSolver, ScriptedPolicy, type MultiHopQuestion,
} from '../../lib/agents/index.js';
import type { TrajectoryChatMessage } from '../../lib/trajectory/index.js';

const documentBudget = process.argv[2] === undefined ? DEFAULT_DOCUMENT_BUDGET : Number(process.argv[2]);

/** A scripted reader for one question: the reference plan, then answers found in the given documents. */
function readerFor(question: MultiHopQuestion): ScriptedPolicy {
  return new ScriptedPolicy((messages: readonly TrajectoryChatMessage[], call: number) => {
    if (call === 0) return question.steps.map((step, k) => `### Q${k + 1}: ${step.question}`).join('\n');
    const last = messages.at(-1)!.content ?? '';
    const step = question.steps[call - 1];
    if (step === undefined) {
      // The final answer: the answer of the last hop, as the conversation holds it.
      const previous = messages.filter((message) => message.role === 'assistant').at(-1)!.content ?? '';
      return `So the answer is ${previous}`;
    }
    const documents = last.slice(0, last.indexOf('\n\nSub-question'));
    return documents.toLowerCase().includes(step.answer.toLowerCase()) ? `\\boxed{${step.answer}}` : '\\boxed{unknown}';
  });
}

const retriever = new Bm25Retriever(BUILTIN_CORPUS);
let correct = 0;
for (const question of BUILTIN_QUESTIONS) {
  const agent = new DecomposerSolver({ policy: readerFor(question), retriever, documentBudget });
  const trajectory = await agent.run({ id: question.id, prompt: question.question, gold: question.answers });
  const metadata = trajectory.metadata!;
  correct += trajectory.reward!;
  console.log(`${question.id} ${trajectory.reward === 1 ? 'correct' : 'wrong  '} ${question.question}`);
  (metadata.resolvedSubquestions as string[]).forEach((subquestion, k) => {
    const documents = (metadata.documentIds as string[][])[k]!;
    console.log(`    #${k + 1} ${subquestion} -> ${(metadata.intermediateAnswers as string[])[k]}  [${documents.join(', ')}]`);
  });
}
console.log(`\n${correct}/${BUILTIN_QUESTIONS.length} correct with a budget of ${documentBudget} documents per question`);
