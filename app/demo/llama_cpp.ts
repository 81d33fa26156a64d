/**
 * `tirl demo --engine llama.cpp`: the production loop in miniature. A Llama-architecture
 * policy (tfjs, trained by GRPOTrainer with tirl's kernels) is exported as GGUF and served by
 * llama.cpp (node-llama-cpp), which samples every rollout token in, token out with its own
 * kernels and reports its own log-probs. After each optimizer step (or every k) the weights
 * are exported and reloaded in the engine; with a staleness s the engine serves the weights
 * of s versions ago, as an s-deep asynchronous pipeline would. The trainer recomputes the
 * log-probs, measures the engine/trainer mismatch every step and applies rollout correction
 * (token-level truncated importance sampling from the rolloutCorrection kernel).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import * as tf from '@tensorflow/tfjs';

import { renderPng, renderSvg, type Panel } from '../charts/line_chart.js';
import {
  EnginePolicy, GRPOTrainer, LlamaCppEngine, loadNodeLlamaCpp, type GRPOStepMetrics, type ObservationRole,
} from '../../lib/index.js';
import { LlamaModel, TfjsPolicy } from '../../lib/training/tfjs.js';
import { demoSetup, demoTask, demoVoidTurnFilter, evaluate, LLAMA_RL_STEPS, pct, type DemoRunConfig, type EngineLoopConfig } from './index.js';
import type { Problem } from './problems.js';
import { buildWarmStartData } from './tirgen.js';
import { TOKEN, VOCAB, VOCAB_SIZE, decode, encode } from './vocab.js';
import { warmStart } from './warm_start.js';

/** Settings of the llama.cpp demo. */
/** The llama.cpp loop's settings: the Llama policy's shape on top of every run's and the engine's. */
export interface LlamaDemoConfig extends DemoRunConfig, EngineLoopConfig {
  dModel: number;
  layers: number;
  heads: number;
}

export const LLAMA_DEFAULT_CONFIG: LlamaDemoConfig = {
  seed: 1,
  rlSteps: LLAMA_RL_STEPS,
  warmStartSteps: 30,
  warmStartTraces: 3000,
  batchSize: 32,
  promptsPerStep: 8,
  groupSize: 8,
  dModel: 64,
  layers: 2,
  heads: 4,
  learningRate: 2e-3,
  testProblems: 200,
  syncEvery: 1,
  maxStaleness: 0,
  engineWeights: 'f32',
  rolloutCorrection: true,
  out: 'demo-output',
  json: false,
};

/** The summary of a llama.cpp demo run. */
export interface LlamaDemoSummary {
  engine: 'llama.cpp';
  warmStartSuccess: number;
  rlSuccess: number;
  seconds: number;
  /** Seconds spent: engine sampling (rollouts), trainer (scoring and updates), weight sync, warm start, evaluation. */
  time: { engineSampling: number; trainer: number; sync: number; warmStart: number; evaluation: number };
  syncs: number;
  meanSyncSeconds: number;
  /** Per-step engine/trainer mismatch: largest KL(engine ‖ trainer), largest max |Δlogp|, mean ESS, mean rejected fraction. */
  mismatch: { maxKl: number; meanKl: number; maxAbsLogpDiff: number; meanEffectiveSampleSize: number | null; meanRejectedFraction: number | null };
  staleness: { mean: number; max: number };
  meanGradNorm: number;
  rlSteps: number;
  syncEvery: number;
  maxStaleness: number;
  engineWeights: 'f32' | 'f16';
  rolloutCorrection: boolean;
  model: { dModel: number; layers: number; heads: number; ffnHidden: number; parameters: number };
  seed: number;
  backend: string;
  out: string;
}

/** Exports the trainer's weights as GGUF and reloads them in the engine on the schedule. */
class WeightSync {
  seconds = 0;
  syncs = 0;
  private readonly files = new Map<number, string>();

  constructor(
    private readonly model: LlamaModel,
    private readonly engine: LlamaCppEngine,
    private readonly dir: string,
    private readonly config: Pick<LlamaDemoConfig, 'syncEvery' | 'maxStaleness' | 'engineWeights'>,
  ) {}

  /** Writes version `version` of the weights; returns its path. */
  async export(version: number): Promise<string> {
    const path = join(this.dir, `policy-v${version}.gguf`);
    await writeFile(path, await this.model.toGguf({ tokens: VOCAB, bos: TOKEN.bos, eos: TOKEN.ansEnd, pad: TOKEN.pad }, this.config.engineWeights));
    this.files.set(version, path);
    return path;
  }

  /** After the trainer reached `version`: export it, and on sync steps load `version − maxStaleness`. */
  async afterStep(version: number): Promise<void> {
    const started = performance.now();
    await this.export(version);
    if (version % this.config.syncEvery === 0) {
      const target = Math.max(0, version - this.config.maxStaleness);
      if (target !== this.engine.weightVersion) {
        await this.engine.loadWeights(this.files.get(target)!, target);
        this.syncs++;
      }
    }
    for (const [v, path] of this.files) {
      if (v < version - this.config.maxStaleness && v !== this.engine.weightVersion) {
        this.files.delete(v);
        await rm(path, { force: true });
      }
    }
    this.seconds += (performance.now() - started) / 1000;
  }

  /** Loads `version` now (for evaluation), whatever the schedule. */
  async loadNow(version: number): Promise<void> {
    const path = this.files.get(version) ?? (await this.export(version));
    if (this.engine.weightVersion !== version || this.engine.modelPath !== path) await this.engine.loadWeights(path, version);
  }
}

function metricsTable(rows: GRPOStepMetrics[], syncSeconds: number[]): string {
  const header = 'step  success  reward  kept  mismatch-kl  max|dlogp|    ess  rejected  stale  grad-norm  sample-s  train-s  sync-s';
  const lines = rows.map((m, i) => {
    const c = m.rolloutCorrection;
    return [
      String(m.step).padStart(4),
      pct(m.successRate).padStart(7),
      m.reward.toFixed(2).padStart(7),
      String(m.keptTrajectories).padStart(5),
      (c?.kl ?? 0).toExponential(1).padStart(12),
      (c?.maxAbsLogpDiff ?? 0).toExponential(1).padStart(11),
      (c?.effectiveSampleSize ?? 1).toFixed(3).padStart(6),
      (c?.rejectedFraction ?? 0).toFixed(3).padStart(9),
      (m.staleness?.mean ?? 0).toFixed(1).padStart(6),
      m.gradNorm.toFixed(3).padStart(10),
      m.rolloutSeconds.toFixed(2).padStart(9),
      m.updateSeconds.toFixed(2).padStart(8),
      (syncSeconds[i] ?? 0).toFixed(3).padStart(7),
    ].join(' ');
  });
  return [header, ...lines].join('\n');
}

function chartPanels(steps: GRPOStepMetrics[]): Panel[] {
  const at = (f: (m: GRPOStepMetrics) => number) => steps.map((m) => [m.step, f(m)] as const);
  return [
    { title: 'Success rate (training rollouts)', yRange: [0, 1], series: [{ name: 'success', color: [31, 119, 180], points: at((m) => m.successRate) }] },
    {
      title: 'Engine/trainer mismatch: KL(llama.cpp || tfjs) per token',
      series: [{ name: 'mismatch KL', color: [214, 39, 40], points: at((m) => m.rolloutCorrection?.kl ?? 0) }],
    },
    { title: 'Gradient norm (before clipping)', series: [{ name: 'grad norm', color: [44, 160, 44], points: at((m) => m.gradNorm) }] },
  ];
}

const mean = (values: number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0);

/** Runs the llama.cpp demo; prints progress, a metrics table and the evaluation. */
export async function runLlamaDemoWith(config: LlamaDemoConfig): Promise<LlamaDemoSummary> {
  await loadNodeLlamaCpp(); // fail early, naming the package, before any training
  const started = performance.now();
  const { say, backend, progress, rng, splits } = await demoSetup(config);
  const weightsDir = await mkdtemp(join(tmpdir(), 'tirl-demo-gguf-'));

  const ffnHidden = 2 * config.dModel;
  const model = new LlamaModel(
    { vocabSize: VOCAB_SIZE, dModel: config.dModel, layers: config.layers, heads: config.heads, ffnHidden, contextLength: 256 },
    () => rng.next(),
  );
  const parameters = model.variables.reduce((n, v) => n + v.size, 0);
  say(
    `tirl demo --engine llama.cpp: GRPO with rollouts from llama.cpp (seed ${config.seed}; Llama d_model ${config.dModel}, ` +
      `${config.layers} layers, ${config.heads} heads, ${parameters} parameters; tfjs ${backend} trainer; engine weights ` +
      `${config.engineWeights}, sync every ${config.syncEvery}, staleness ${config.maxStaleness}, rollout correction ${config.rolloutCorrection ? 'token TIS' : 'off'})`,
  );
  const trainerPolicy = new TfjsPolicy({
    model: (tokens) => model.logits(tokens),
    variables: model.variables,
    optimizer: tf.train.adam(config.learningRate),
    tokenizer: {
      encode: (text: string, role: ObservationRole) => Int32Array.from(role === 'prompt' ? [TOKEN.bos, ...encode(text)] : encode(text)),
      decode: (tokens: Int32Array) => decode(tokens),
    },
    stopTokens: [TOKEN.calcEnd, TOKEN.ansEnd],
    padToken: TOKEN.pad,
  });

  const data = buildWarmStartData(() => splits.nextTrain(), config.warmStartTraces, rng);
  say(`TIRGen: the refiner kept ${data.traces.length} of ${data.proposed} proposed solutions`);
  const warmStarted = performance.now();
  await warmStart(trainerPolicy, data.traces, {
    steps: config.warmStartSteps,
    batchSize: config.batchSize,
    rng,
    onStep: (step, loss) => progress.update('warm start', step, config.warmStartSteps, `loss ${loss.toFixed(3)}`),
  });
  progress.done();
  const warmStartSeconds = (performance.now() - warmStarted) / 1000;

  const firstPath = join(weightsDir, 'policy-v0.gguf');
  await writeFile(firstPath, await model.toGguf({ tokens: VOCAB, bos: TOKEN.bos, eos: TOKEN.ansEnd, pad: TOKEN.pad }, config.engineWeights));
  const engine = await LlamaCppEngine.open({ modelPath: firstPath, sequences: 16, contextSize: 160, threads: 1, weightVersion: 0 });
  const sync = new WeightSync(model, engine, weightsDir, config);
  const policy = new EnginePolicy({ trainer: trainerPolicy, engine, decode: (tokens) => decode(tokens), stopTokenIds: [TOKEN.calcEnd, TOKEN.ansEnd] });
  try {
    let evaluationSeconds = 0;
    const timedEvaluate = async () => {
      const t = performance.now();
      const success = await evaluate(policy, splits.test, config.seed + 1000);
      evaluationSeconds += (performance.now() - t) / 1000;
      return success;
    };
    await sync.export(0);
    const warmStartSuccess = await timedEvaluate();
    say(`warm start: held-out success ${pct(warmStartSuccess)} on ${splits.test.length} problems (sampled by llama.cpp)`);

    const steps: GRPOStepMetrics[] = [];
    const syncSeconds: number[] = [];
    const trainer = new GRPOTrainer<Problem>({
      policy,
      ...demoTask(splits, config),
      filters: [demoVoidTurnFilter()],
      ...(config.rolloutCorrection ? { rolloutCorrection: { rolloutIs: 'token' as const, rolloutIsThreshold: 2 } } : {}),
      logFile: join(config.out, 'metrics.jsonl'),
      onStep: async (metrics) => {
        const before = sync.seconds;
        await sync.afterStep(metrics.step);
        syncSeconds.push(sync.seconds - before);
        steps.push(metrics);
        const c = metrics.rolloutCorrection;
        progress.update('GRPO', metrics.step, config.rlSteps, `success ${pct(metrics.successRate)} kl ${(c?.kl ?? 0).toExponential(1)}`);
        if (!config.json && (metrics.step % 5 === 0 || metrics.step === config.rlSteps)) {
          progress.done();
          say(metricsTable(steps.slice(-5), syncSeconds.slice(-5)));
        }
      },
    });
    await trainer.train(config.rlSteps);
    await trainer.close();
    progress.done();
    await sync.loadNow(config.rlSteps);
    const rlSuccess = await timedEvaluate();

    const panels = chartPanels(steps);
    const chartTitle = `tirl demo --engine llama.cpp (${config.engineWeights}, staleness ${config.maxStaleness}, correction ${config.rolloutCorrection ? 'on' : 'off'})`;
    await writeFile(join(config.out, 'chart.svg'), renderSvg(panels, { title: chartTitle, xLabel: 'GRPO step' }));
    await writeFile(join(config.out, 'chart.png'), renderPng(panels, { title: chartTitle, xLabel: 'GRPO step' }));

    const corrections = steps.map((m) => m.rolloutCorrection!).filter(Boolean);
    const ess = corrections.flatMap((c) => (c.effectiveSampleSize === undefined ? [] : [c.effectiveSampleSize]));
    const rejected = corrections.flatMap((c) => (c.rejectedFraction === undefined ? [] : [c.rejectedFraction]));
    const summary: LlamaDemoSummary = {
      engine: 'llama.cpp',
      warmStartSuccess,
      rlSuccess,
      seconds: (performance.now() - started) / 1000,
      time: {
        engineSampling: steps.reduce((a, m) => a + m.rolloutSeconds, 0),
        trainer: steps.reduce((a, m) => a + m.updateSeconds, 0),
        sync: sync.seconds,
        warmStart: warmStartSeconds,
        evaluation: evaluationSeconds,
      },
      syncs: sync.syncs,
      meanSyncSeconds: sync.syncs ? sync.seconds / sync.syncs : 0,
      mismatch: {
        maxKl: Math.max(0, ...corrections.map((c) => c.kl)),
        meanKl: mean(corrections.map((c) => c.kl)),
        maxAbsLogpDiff: Math.max(0, ...corrections.map((c) => c.maxAbsLogpDiff)),
        meanEffectiveSampleSize: ess.length ? mean(ess) : null,
        meanRejectedFraction: rejected.length ? mean(rejected) : null,
      },
      staleness: { mean: mean(steps.map((m) => m.staleness?.mean ?? 0)), max: Math.max(0, ...steps.map((m) => m.staleness?.max ?? 0)) },
      meanGradNorm: mean(steps.map((m) => m.gradNorm)),
      rlSteps: config.rlSteps,
      syncEvery: config.syncEvery,
      maxStaleness: config.maxStaleness,
      engineWeights: config.engineWeights,
      rolloutCorrection: config.rolloutCorrection,
      model: { dModel: config.dModel, layers: config.layers, heads: config.heads, ffnHidden, parameters },
      seed: config.seed,
      backend,
      out: config.out,
    };
    await writeFile(join(config.out, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');

    say('');
    say(`held-out success: warm start ${pct(warmStartSuccess)} -> after GRPO ${pct(rlSuccess)} (${(100 * (rlSuccess - warmStartSuccess)).toFixed(1)} points)`);
    say(
      `engine/trainer mismatch per step: KL(llama.cpp || tfjs) mean ${summary.mismatch.meanKl.toExponential(1)}, max ${summary.mismatch.maxKl.toExponential(1)}; ` +
        `max |dlogp| ${summary.mismatch.maxAbsLogpDiff.toExponential(1)}; staleness mean ${summary.staleness.mean.toFixed(1)}`,
    );
    const t = summary.time;
    say(
      `time: engine sampling ${t.engineSampling.toFixed(0)} s, trainer ${t.trainer.toFixed(0)} s, weight sync ${t.sync.toFixed(1)} s ` +
        `(${summary.syncs} reloads, ${(1000 * summary.meanSyncSeconds).toFixed(0)} ms each), warm start ${t.warmStart.toFixed(0)} s, evaluation ${t.evaluation.toFixed(0)} s; total ${summary.seconds.toFixed(0)} s`,
    );
    say(`log ${join(config.out, 'metrics.jsonl')}, chart ${join(config.out, 'chart.png')} and .svg, summary ${join(config.out, 'summary.json')}`);
    if (config.json) process.stdout.write(JSON.stringify(summary) + '\n');
    return summary;
  } finally {
    await engine.close();
    trainerPolicy.dispose();
    model.dispose();
    await rm(weightsDir, { recursive: true, force: true });
  }
}
