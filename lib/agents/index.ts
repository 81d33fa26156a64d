/**
 * Agents: ready loops for tool-using models (AlphaApollo's multi-turn reasoner and
 * propose–judge–update, THOR's self-correction and TIRGen data construction, AceSearcher's
 * decomposer–solver), each producing full trajectories, plus the policy interface they
 * share and a built-in corpus for offline retrieval.
 */
export {
  ChatCompletionPolicy, ScriptedPolicy,
  type AgentPolicy, type ChatCompletionDefaults, type GenerateOptions, type Generation, type ScriptFunction, type ScriptedResponse,
} from './agent_policy.js';
export {
  lastCodeBlock, lastDelimitedBlock, type AgentTask, type AnswerExtractor, type CodeMarkup, type CodeSession, type RewardFunction, type ToolUseOptions,
} from './common.js';
export { MultiTurnReasoner, REASONER_SYSTEM_PROMPT, type MultiTurnReasonerOptions } from './multi_turn_reasoner.js';
export {
  SelfCorrectingAgent, SELF_CORRECTING_SYSTEM_PROMPT, defaultCorrectionPrompt,
  type CorrectionPrompt, type RetryMode, type SelfCorrectingAgentOptions, type StepAttempt,
} from './self_correcting_agent.js';
export {
  ProposeJudgeUpdate, JUDGE_SYSTEM_PROMPT, MAX_CRITIQUE_CHARS, PROPOSER_SYSTEM_PROMPT, defaultRefinePrompt, judgeVerifier, majorityVerifier, referenceVerifier, selectMemory, toolVerifier,
  type Candidate, type JudgeVerifierOptions, type MajorityVerifierOptions, type MemoryStrategy, type ReferenceVerifierOptions, type ProposeJudgeUpdateOptions, type ProposeJudgeUpdateResult, type RefinePrompt, type RoundRecord,
  type ToolVerifierOptions, type Verdict, type Verifier,
} from './propose_judge_update.js';
export {
  DecomposerSolver, DEFAULT_DECOMPOSER_PROMPTS, DEFAULT_DOCUMENT_BUDGET, SUBQUESTION_MARKER, decomposerPreferenceQuestion, decomposerReferenceEpisodes,
  parseSubquestions, resolveReferences, splitDocumentBudget, type ReferenceFormat,
  type DecomposerPrompts, type DecomposerSolverOptions,
} from './decomposer_solver.js';
export {
  Bm25Retriever, type Bm25RetrieverOptions, type CorpusDocument, type RetrievedDocument, type Retriever,
} from './retrieval.js';
export {
  TIRGen, TIRGEN_GENERATOR_SYSTEM_PROMPT, TIRGEN_REFINER_SYSTEM_PROMPT, defaultTirGenRefinePrompt,
  type TirGenOptions, type TirGenOutcome, type TirGenRefinePrompt, type TirGenReport, type TirGenResult,
} from './tirgen.js';
export { BUILTIN_CORPUS } from './data/corpus.js';
export { BUILTIN_QUESTIONS, type MultiHopQuestion, type ReferenceStep } from './data/questions.js';
export { parseHermesToolCall, TokenAgentPolicy, type ParsedTurn, type TokenAgentPolicyOptions } from './token_policy.js';
