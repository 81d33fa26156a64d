/**
 * `tirl demo`: trains a small tool-using policy end to end on this machine.
 *
 * 1. TIRGen warm-start data: a generator proposes tool-integrated solutions to arithmetic
 *    word problems, a refiner runs them through the calculator and keeps verified ones.
 * 2. Warm start: supervised fine-tuning of a GRU policy on those traces.
 * 3. GRPO (tirl's GRPOTrainer): groups of episodes per problem with a real calculator
 *    tool each turn, group-normalised advantages, SimpleTIR's void-turn filter, feedback
 *    masking, PPO updates; log-probs, losses and gradients computed by tirl's kernels.
 * 4. Held-out evaluation of the warm start and of the RL policy on problems never seen.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import * as tf from '@tensorflow/tfjs';

import { renderPng, renderSvg, type Panel } from '../charts/line_chart.js';
import { GRPOTrainer, SeededRandom, rollout, type Episode, type EpisodeFilter, type GRPOStepMetrics, type Policy } from '../../lib/index.js';
import { ArithmeticEnvironment, MAX_TURNS, MAX_TURN_TOKENS, isVoidAction } from './environment.js';
import { DemoPolicy } from './policy.js';
import { ProblemSplits, type Problem } from './problems.js';
import { buildWarmStartData } from './tirgen.js';
import { warmStart } from './warm_start.js';

/** The demo's settings; `--quick` shrinks them for smoke tests. */
/** What a demo run takes whichever engine samples its rollouts. */
export interface DemoRunConfig {
  seed: number;
  /** GRPO steps. */
  rlSteps: number;
  /** Supervised warm-start steps on the TIRGen-style traces, and how many traces to propose. */
  warmStartSteps: number;
  warmStartTraces: number;
  batchSize: number;
  promptsPerStep: number;
  groupSize: number;
  learningRate: number;
  /** Held-out problems each evaluation samples one episode of. */
  testProblems: number;
  /** Where the log, chart and summary go. */
  out: string;
  /** Print the summary as one JSON object on the last line. */
  json: boolean;
}

/** The llama.cpp loop's engine settings (app/demo/llama_cpp.ts). */
export interface EngineLoopConfig {
  /** Export and reload the engine's weights every this many steps. */
  syncEvery: number;
  /** The engine serves the weights of this many versions ago (0: on-policy up to sync lag). */
  maxStaleness: number;
  /** Element type of the engine's matrices. */
  engineWeights: 'f32' | 'f16';
  /** Apply token-level TIS (threshold 2) to the loss; off: the mismatch is only measured. */
  rolloutCorrection: boolean;
}

/** `tirl demo`'s settings: the GRU run's, and the llama.cpp loop's (used with `engine: 'llama.cpp'`). */
export interface DemoConfig extends DemoRunConfig, EngineLoopConfig {
  /** The GRU's hidden size. */
  hidden: number;
  /** Drop trajectories with a void turn from the loss (SimpleTIR's filter). */
  voidFilter: boolean;
  /** Who samples the rollouts: the tfjs GRU policy itself, or llama.cpp serving a Llama policy (app/demo/llama_cpp.ts). */
  engine: 'tfjs' | 'llama.cpp';
}

/** GRPO steps of the llama.cpp loop by default (each step also exports and reloads the engine's weights). */
export const LLAMA_RL_STEPS = 60;

export const DEFAULT_CONFIG: DemoConfig = {
  seed: 1,
  rlSteps: 160,
  warmStartSteps: 150,
  warmStartTraces: 3000,
  batchSize: 32,
  promptsPerStep: 8,
  groupSize: 8,
  hidden: 64,
  learningRate: 3e-3,
  testProblems: 200,
  voidFilter: true,
  out: 'demo-output',
  json: false,
  engine: 'tfjs',
  syncEvery: 1,
  maxStaleness: 0,
  engineWeights: 'f32',
  rolloutCorrection: true,
};

/** `--quick`: a short run of either engine (a smoke test). */
export const DEMO_QUICK: Partial<DemoRunConfig> = { rlSteps: 4, warmStartSteps: 20, warmStartTraces: 300, testProblems: 40, promptsPerStep: 4 };

/** The summary a run ends with (the last line of `--json`). */
export interface DemoSummary {
  warmStartSuccess: number;
  rlSuccess: number;
  seconds: number;
  voidFilteredFraction: number;
  voidTurnFraction: number;
  meanGradNorm: number;
  maxGradNorm: number;
  /**
   * Largest |KL(rollout ‖ trainer)| over the GRPO steps: the sampler's log-probs against the
   * trainer's recomputed ones. The demo samples and scores with the same weights, so ~0.
   */
  maxRolloutTrainerKl: number;
  rlSteps: number;
  voidFilter: boolean;
  seed: number;
  backend: string;
  warmStart: { proposed: number; kept: number; steps: number; finalLoss: number };
  out: string;
}

const USAGE = `usage: tirl demo [--seed N] [--steps N] [--out DIR] [--no-void-filter] [--quick] [--json]
       tirl demo --engine llama.cpp [--engine-weights f32|f16] [--sync-every K] [--max-staleness S]
                 [--no-rollout-correction] [--seed N] [--steps N] [--out DIR] [--quick] [--json]

Trains a small tool-using policy with GRPO on arithmetic word problems that need a
calculator tool, from a TIRGen-style warm start, and compares both on held-out problems.
  --seed N           random seed (default ${DEFAULT_CONFIG.seed})
  --steps N          GRPO steps (default ${DEFAULT_CONFIG.rlSteps})
  --out DIR          where the log, chart and summary go (default ${DEFAULT_CONFIG.out}/)
  --no-void-filter   keep trajectories with void turns in the loss (SimpleTIR's ablation)
  --quick            a short run (smoke test)
  --json             print the summary as one JSON object on the last line
  --engine E         who samples rollouts: tfjs (default: the GRU policy itself) or llama.cpp
                     (a Llama-architecture policy exported as GGUF and served by node-llama-cpp,
                     weights synced after each step, rollout correction on; ${LLAMA_RL_STEPS} steps by default)
  --engine-weights T llama.cpp: f32 (default) or f16 matrices in the engine
  --sync-every K     llama.cpp: export and reload the weights every K steps (default 1)
  --max-staleness S  llama.cpp: the engine serves weights S versions old, as an S-deep
                     asynchronous pipeline would (default 0)
  --no-rollout-correction  llama.cpp: measure the engine/trainer mismatch but do not correct it`;

/** Parses `tirl demo` arguments; throws a RangeError with the usage on bad input. */
export function parseDemoArgs(argv: string[]): DemoConfig | 'help' {
  const { values } = parseArgs({
    args: argv,
    options: {
      seed: { type: 'string' },
      steps: { type: 'string' },
      out: { type: 'string' },
      'no-void-filter': { type: 'boolean' },
      quick: { type: 'boolean' },
      json: { type: 'boolean' },
      engine: { type: 'string' },
      'engine-weights': { type: 'string' },
      'sync-every': { type: 'string' },
      'max-staleness': { type: 'string' },
      'no-rollout-correction': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) return 'help';
  const config: DemoConfig = { ...DEFAULT_CONFIG, ...(values.quick ? DEMO_QUICK : {}) };
  const integer = (name: string, text: string | undefined, min: number): number | undefined => {
    if (text === undefined) return undefined;
    const n = Number(text);
    if (!Number.isInteger(n) || n < min) throw new RangeError(`tirl demo: expected an integer >= ${min} for --${name} but received '${text}'\n${USAGE}`);
    return n;
  };
  const engine = values.engine ?? 'tfjs';
  if (engine !== 'tfjs' && engine !== 'llama.cpp') throw new RangeError(`tirl demo: expected tfjs or llama.cpp for --engine but received '${engine}'\n${USAGE}`);
  config.engine = engine;
  if (engine === 'tfjs') {
    for (const flag of ['engine-weights', 'sync-every', 'max-staleness', 'no-rollout-correction'] as const) {
      if (values[flag] !== undefined) throw new RangeError(`tirl demo: --${flag} needs --engine llama.cpp\n${USAGE}`);
    }
  } else {
    config.rlSteps = values.quick ? config.rlSteps : LLAMA_RL_STEPS;
  }
  const weights = values['engine-weights'] ?? 'f32';
  if (weights !== 'f32' && weights !== 'f16') throw new RangeError(`tirl demo: expected f32 or f16 for --engine-weights but received '${weights}'\n${USAGE}`);
  config.engineWeights = weights;
  config.syncEvery = integer('sync-every', values['sync-every'], 1) ?? config.syncEvery;
  config.maxStaleness = integer('max-staleness', values['max-staleness'], 0) ?? config.maxStaleness;
  config.rolloutCorrection = !values['no-rollout-correction'];
  config.seed = integer('seed', values.seed, 0) ?? config.seed;
  config.rlSteps = integer('steps', values.steps, 0) ?? config.rlSteps;
  config.out = values.out ?? config.out;
  config.voidFilter = !values['no-void-filter'];
  config.json = values.json ?? false;
  return config;
}

/** Loads the fastest TensorFlow.js backend that works here (wasm, else cpu). */
export async function initTensorFlow(): Promise<string> {
  await import('@tensorflow/tfjs-backend-wasm');
  for (const backend of ['wasm', 'cpu']) {
    try {
      if (await tf.setBackend(backend)) {
        await tf.ready();
        return backend;
      }
    } catch {
      // try the next backend
    }
  }
  throw new Error('tirl demo: no TensorFlow.js backend could start');
}

/** A one-line progress bar on stderr (redrawn in place on a terminal). */
export class Progress {
  private readonly tty = process.stderr.isTTY === true;
  private lastLine = 0;

  update(phase: string, done: number, total: number, detail: string): void {
    const width = 24;
    const filled = Math.round((done / Math.max(total, 1)) * width);
    const line = `${phase.padEnd(11)} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} ${detail}`;
    if (this.tty) process.stderr.write(`\r\x1b[2K${line}`);
    else if (done === total || Date.now() - this.lastLine > 5000) {
      process.stderr.write(line + '\n');
      this.lastLine = Date.now();
    }
  }

  done(): void {
    if (this.tty) process.stderr.write('\n');
  }
}

export const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

/** Held-out success rate: one sampled episode per problem. */
export async function evaluate(policy: Policy, problems: readonly Problem[], seed: number): Promise<number> {
  const episodes = await rollout(
    policy,
    problems.map(() => new ArithmeticEnvironment()),
    problems,
    problems.map((_, i) => i),
    { maxTurns: MAX_TURNS, maxTurnTokens: MAX_TURN_TOKENS, maxTokens: 128 },
    new SeededRandom(seed),
  );
  return episodes.filter((e) => e.success).length / episodes.length;
}

/** The demo's task as GRPOTrainer options: the calculator environment, training problems, group and episode limits, seed. */
export function demoTask(splits: ProblemSplits, config: Pick<DemoConfig, 'promptsPerStep' | 'groupSize' | 'seed'>) {
  return {
    createEnvironment: () => new ArithmeticEnvironment(),
    problems: () => Array.from({ length: config.promptsPerStep }, () => splits.nextTrain()),
    groupSize: config.groupSize,
    maxTurns: MAX_TURNS,
    maxTurnTokens: MAX_TURN_TOKENS,
    maxTokens: 128,
    seed: config.seed,
  };
}

/** SimpleTIR's filter in the demo's markup: an action with neither a complete `<calc>` call nor an `<ans>`. */
export function demoVoidTurnFilter(): EpisodeFilter {
  return { name: 'voidTurn', removes: (episode) => episode.turns.some((turn) => isVoidAction(turn.action)) };
}

function metricsTable(rows: GRPOStepMetrics[]): string {
  const header = 'step  success  reward  void-filtered  kept  clip-frac  approx-kl  rollout-kl  entropy  grad-norm  tok/s';
  const lines = rows.map((m) => {
    const filtered = m.filtered.voidTurn?.trajectories ?? 0;
    return [
      String(m.step).padStart(4),
      pct(m.successRate).padStart(7),
      m.reward.toFixed(2).padStart(7),
      `${filtered}/${m.episodes}`.padStart(14),
      String(m.keptTrajectories).padStart(5),
      m.clipFraction.toFixed(3).padStart(10),
      m.approxKl.toExponential(1).padStart(10),
      (m.rolloutCorrection?.kl ?? 0).toExponential(1).padStart(11),
      m.entropy.toFixed(3).padStart(8),
      m.gradNorm.toFixed(3).padStart(10),
      Math.round(m.tokensPerSecond).toString().padStart(6),
    ].join(' ');
  });
  return [header, ...lines].join('\n');
}

function chartPanels(steps: GRPOStepMetrics[], voidCounts: number[]): Panel[] {
  const at = (f: (m: GRPOStepMetrics, i: number) => number) => steps.map((m, i) => [m.step, f(m, i)] as const);
  return [
    { title: 'Success rate (training rollouts)', yRange: [0, 1], series: [{ name: 'success', color: [31, 119, 180], points: at((m) => m.successRate) }] },
    {
      title: 'Trajectories with a void turn',
      yRange: [0, 1],
      series: [{ name: 'void-turn fraction', color: [214, 39, 40], points: at((m, i) => voidCounts[i] / m.episodes) }],
    },
    { title: 'Gradient norm (before clipping)', series: [{ name: 'grad norm', color: [44, 160, 44], points: at((m) => m.gradNorm) }] },
  ];
}

/** What both demos start with: output (silent with --json), tfjs, a progress bar, the seeded generator, the problem splits, the output folder. */
export async function demoSetup(config: Pick<DemoConfig, 'seed' | 'testProblems' | 'out' | 'json'>) {
  const say = (text: string) => {
    if (!config.json) process.stdout.write(text + '\n');
  };
  const backend = await initTensorFlow();
  const rng = new SeededRandom(config.seed);
  const splits = new ProblemSplits(config.seed, { testSize: config.testProblems });
  await mkdir(config.out, { recursive: true });
  return { say, backend, progress: new Progress(), rng, splits };
}

/** Runs the demo with `config`; prints progress, a metrics table and the evaluation. */
export async function runDemoWith(config: DemoConfig): Promise<DemoSummary> {
  const started = performance.now();
  const { say, backend, progress, rng, splits } = await demoSetup(config);

  say(`tirl demo: GRPO on tool-integrated arithmetic (seed ${config.seed}, tfjs ${backend} backend, void-turn filter ${config.voidFilter ? 'on' : 'off'})`);
  const data = buildWarmStartData(() => splits.nextTrain(), config.warmStartTraces, rng);
  say(`TIRGen: the refiner kept ${data.traces.length} of ${data.proposed} proposed solutions (every tool call ran, the answer checked)`);

  const policy = new DemoPolicy({ hidden: config.hidden, learningRate: config.learningRate, rng });
  const losses = await warmStart(policy, data.traces, {
    steps: config.warmStartSteps,
    batchSize: config.batchSize,
    rng,
    onStep: (step, loss) => progress.update('warm start', step, config.warmStartSteps, `loss ${loss.toFixed(3)}`),
  });
  progress.done();
  const warmStartSuccess = await evaluate(policy, splits.test, config.seed + 1000);
  say(`warm start: held-out success ${pct(warmStartSuccess)} on ${splits.test.length} problems`);

  const steps: GRPOStepMetrics[] = [];
  const voidCounts: number[] = [];
  const trainer = new GRPOTrainer<Problem>({
    policy,
    ...demoTask(splits, config),
    filters: config.voidFilter ? [demoVoidTurnFilter()] : [],
    logFile: join(config.out, 'metrics.jsonl'),
    onEpisodes: (episodes: readonly Episode<Problem>[]) => {
      voidCounts.push(episodes.filter((e) => e.turns.some((t) => isVoidAction(t.action))).length);
    },
    onStep: (metrics) => {
      steps.push(metrics);
      progress.update('GRPO', metrics.step, config.rlSteps, `success ${pct(metrics.successRate)} grad ${metrics.gradNorm.toFixed(2)}`);
      if (!config.json && (metrics.step % 5 === 0 || metrics.step === config.rlSteps)) {
        progress.done();
        say(metricsTable(steps.slice(-5)));
      }
    },
  });
  await trainer.train(config.rlSteps);
  await trainer.close();
  progress.done();
  const rlSuccess = await evaluate(policy, splits.test, config.seed + 1000);

  const panels = chartPanels(steps, voidCounts);
  const chartTitle = `tirl demo: GRPO with the void-turn filter ${config.voidFilter ? 'on' : 'off'}`;
  await writeFile(join(config.out, 'chart.svg'), renderSvg(panels, { title: chartTitle, xLabel: 'GRPO step' }));
  await writeFile(join(config.out, 'chart.png'), renderPng(panels, { title: chartTitle, xLabel: 'GRPO step' }));

  const episodes = steps.reduce((a, m) => a + m.episodes, 0);
  const gradNorms = steps.map((m) => m.gradNorm);
  const summary: DemoSummary = {
    warmStartSuccess,
    rlSuccess,
    seconds: (performance.now() - started) / 1000,
    voidFilteredFraction: episodes ? steps.reduce((a, m) => a + (m.filtered.voidTurn?.trajectories ?? 0), 0) / episodes : 0,
    voidTurnFraction: episodes ? voidCounts.reduce((a, b) => a + b, 0) / episodes : 0,
    meanGradNorm: gradNorms.length ? gradNorms.reduce((a, b) => a + b, 0) / gradNorms.length : 0,
    maxGradNorm: gradNorms.length ? Math.max(...gradNorms) : 0,
    maxRolloutTrainerKl: Math.max(0, ...steps.map((m) => Math.abs(m.rolloutCorrection?.kl ?? 0))),
    rlSteps: config.rlSteps,
    voidFilter: config.voidFilter,
    seed: config.seed,
    backend,
    warmStart: { proposed: data.proposed, kept: data.traces.length, steps: config.warmStartSteps, finalLoss: losses[losses.length - 1] ?? NaN },
    out: config.out,
  };
  await writeFile(join(config.out, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');
  policy.dispose();

  say('');
  say(`held-out success: warm start ${pct(warmStartSuccess)} -> after GRPO ${pct(rlSuccess)} (${(100 * (rlSuccess - warmStartSuccess)).toFixed(1)} points)`);
  say(`trajectories with a void turn: ${pct(summary.voidTurnFraction)}${config.voidFilter ? ' (masked out of the loss)' : ' (kept in the loss: --no-void-filter)'}; gradient norm mean ${summary.meanGradNorm.toFixed(3)}, max ${summary.maxGradNorm.toFixed(3)}`);
  say(`rollout/trainer log-prob mismatch: KL(rollout || trainer) at most ${summary.maxRolloutTrainerKl.toExponential(1)} per step (the same weights sample and score)`);
  say(`log ${join(config.out, 'metrics.jsonl')}, chart ${join(config.out, 'chart.png')} and .svg, ${summary.seconds.toFixed(0)} s`);
  if (config.json) process.stdout.write(JSON.stringify(summary) + '\n');
  return summary;
}

/** Entry point of `tirl demo ARGS`. */
export async function runDemo(argv: string[]): Promise<void> {
  let config: DemoConfig | 'help';
  try {
    config = parseDemoArgs(argv);
  } catch (error) {
    // A flag error: the CLI prints it with the usage and exits with status 2.
    const message = (error as Error).message.split('\n')[0];
    throw Object.assign(new Error(`${message.startsWith('tirl demo') ? message : `tirl demo: ${message}`}\n\n${USAGE}`), { usage: true });
  }
  if (config === 'help') {
    process.stdout.write(USAGE + '\n');
    return;
  }
  if (config.engine === 'llama.cpp') {
    const { runLlamaDemoWith, LLAMA_DEFAULT_CONFIG } = await import('./llama_cpp.js');
    const quick = argv.includes('--quick');
    await runLlamaDemoWith({
      ...LLAMA_DEFAULT_CONFIG,
      ...(quick ? DEMO_QUICK : {}),
      seed: config.seed,
      rlSteps: config.rlSteps,
      syncEvery: config.syncEvery,
      maxStaleness: config.maxStaleness,
      engineWeights: config.engineWeights,
      rolloutCorrection: config.rolloutCorrection,
      out: config.out,
      json: config.json,
    });
    return;
  }
  await runDemoWith(config);
}
