/**
 * A served model for agents to run against: the demo's GRU policy, warm-started with
 * `SFTTrainer` on TIRGen traces for a few seconds, checkpointed, and served by `tirl serve`'s
 * server from that checkpoint on a free localhost port, together with the agent-facing
 * token-in/token-out policy over it.
 *
 * Learning from the served model: the server samples with `RunningServer.policy`, a
 * trainable `TfjsPolicy` in this process, so a trainer given that policy updates the weights
 * the server serves from the next request on (no reload, no copy); requests and updates take
 * turns on the one JavaScript thread.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { SeededRandom, TokenAgentPolicy, TokenCompletionClient, type TokenApi } from '../../lib/index.js';
import { demoChatTemplate, demoTokenizer } from '../demo/agent_format.js';
import { DEFAULT_CONFIG } from '../demo/index.js';
import { DemoPolicy } from '../demo/policy.js';
import { ProblemSplits, type Problem } from '../demo/problems.js';
import { buildWarmStartData } from '../demo/tirgen.js';
import { warmStart } from '../demo/warm_start.js';
import { initBackend, startServer, type RunningServer } from './server.js';

/** Options of {@link trainDemoCheckpoint} and {@link startTrainedServer}. */
export interface TrainedServerOptions {
  /** Seed of the problems, the traces, the weights and the server. Default 1. */
  seed?: number;
  /** Supervised warm-start steps (batches of 32 traces). Default 30. */
  warmStartSteps?: number;
  /** Verified TIRGen traces to train on. Default 600. */
  traces?: number;
  /** Adam's learning rate, of the warm start and of later training of the served policy. Default 0.02. */
  learningRate?: number;
  /** Where to write the checkpoint. Default: a fresh temporary directory (removed by `close`). */
  checkpointDir?: string;
  /**
   * Kinds of demo problems to train on and pose (see `Problem.kind`). Default the one-call
   * ones ('product', 'word', 'conversion'): a few seconds of warm start solve about 40% of
   * them, and calls that fail to run are common (a product's `#1*#2` written for a
   * conversion, which has one number), so episodes both succeed and fail, as group-relative
   * training and THOR's corrections need.
   */
  kinds?: readonly string[];
}

/** A stream of training problems of the given kinds. */
function problemsOf(splits: ProblemSplits, kinds: readonly string[]): () => Problem {
  return () => {
    for (;;) {
      const problem = splits.nextTrain();
      if (kinds.includes(problem.kind)) return problem;
    }
  };
}

const DEFAULT_KINDS = ['product', 'word', 'conversion'];

/** A served, trained demo policy. */
export interface TrainedServer extends RunningServer {
  /** The checkpoint the server loaded (a `saveState` directory). */
  checkpoint: string;
  /** Fresh problems of the served kinds (none of them trained on). */
  nextProblem: () => Problem;
  /** A stream of its own of problems (of `kinds`, default the served ones), seeded: the same problems whatever ran before. */
  problems(seed: number, kinds?: readonly string[]): () => Problem;
  /**
   * The agent-facing policy over the server's token API: prompts as ids, sampled ids with
   * their log-probs back, so agents' trajectories carry the exact token record.
   */
  agentPolicy(options?: { api?: TokenApi; maxTokens?: number; seed?: number; policyVersion?: () => number }): TokenAgentPolicy;
}

/**
 * Warm-starts a demo policy with supervised fine-tuning on verified TIRGen traces and writes
 * its checkpoint into `dir` (what `tirl serve --checkpoint dir` serves); returns the policy.
 */
export async function trainDemoCheckpoint(dir: string, options: TrainedServerOptions = {}): Promise<DemoPolicy> {
  const seed = options.seed ?? 1;
  await initBackend();
  const rng = new SeededRandom(seed);
  const splits = new ProblemSplits(seed, { testSize: 40 });
  const data = buildWarmStartData(problemsOf(splits, options.kinds ?? DEFAULT_KINDS), options.traces ?? 600, rng);
  const policy = new DemoPolicy({ hidden: DEFAULT_CONFIG.hidden, learningRate: options.learningRate ?? 0.02, rng });
  await warmStart(policy, data.traces, { steps: options.warmStartSteps ?? 30, batchSize: 32, rng });
  await policy.saveState(dir);
  return policy;
}

/**
 * Trains a checkpoint ({@link trainDemoCheckpoint}) and serves that trained policy on a free
 * localhost port. (The policy is served as trained rather than reloaded: tfjs variable names
 * are unique per process, so a checkpoint loads into a fresh process, as `tirl serve
 * --checkpoint` does.)
 */
export async function startTrainedServer(options: TrainedServerOptions = {}): Promise<TrainedServer> {
  const seed = options.seed ?? 1;
  const owned = options.checkpointDir === undefined;
  const checkpoint = options.checkpointDir ?? (await mkdtemp(join(tmpdir(), 'tirl-served-')));
  const policy = await trainDemoCheckpoint(checkpoint, options);
  const server = await startServer({ port: 0, policy, seed });
  return {
    ...server,
    checkpoint,
    nextProblem: problemsOf(new ProblemSplits(seed + 100, { testSize: 40 }), options.kinds ?? DEFAULT_KINDS),
    problems: (streamSeed, kinds = options.kinds ?? DEFAULT_KINDS) => problemsOf(new ProblemSplits(seed + 100 + streamSeed, { testSize: 40 }), kinds),
    agentPolicy: ({ api = 'vllm', maxTokens = 14, seed: sampleSeed, policyVersion } = {}) => {
      const client = new TokenCompletionClient(api === 'vllm' ? { api, baseUrl: server.url, model: server.model } : { api, baseUrl: server.url });
      return new TokenAgentPolicy(client, {
        tokenizer: demoTokenizer,
        template: demoChatTemplate,
        maxTokens,
        ...(sampleSeed === undefined ? {} : { seed: sampleSeed }),
        ...(policyVersion === undefined ? {} : { policyVersion }),
      });
    },
    close: async () => {
      await server.close();
      policy.dispose();
      if (owned) await rm(checkpoint, { recursive: true, force: true });
    },
  };
}
