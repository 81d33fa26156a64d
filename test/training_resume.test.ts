/**
 * Checkpoints: a GRPO run killed mid-run (SIGKILL, in a child process) resumes where it
 * stopped and ends exactly where an uninterrupted run ends; a DPO run that crashes
 * mid-round resumes inside the round.
 *
 * Run with TIRL_RESUME_CHILD=<dir>, this file is the child: it trains (or resumes) a
 * GRPO run in <dir> and writes the final weights and metrics to <dir>/final.json.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { before, describe, it } from 'node:test';

import * as tf from '@tensorflow/tfjs';

import { DPOTrainer, type DPOStepMetrics, GRPOTrainer, type GRPOStepMetrics, type TokenPreferencePair } from '../lib/training/index.js';
import { createBigramPolicy, type Product, ProductEnvironment, products, Token } from '../examples/training/arithmetic.js';

const STEPS = 10;
const TIMING = ['seconds', 'rolloutSeconds', 'updateSeconds', 'tokensPerSecond'];

function withoutTiming(metrics: object[]): object[] {
  return metrics.map((m) => Object.fromEntries(Object.entries(m).filter(([k]) => !TIMING.includes(k))));
}

/** The product task with a short pause per action, so that a step lasts long enough to be killed in. */
class SlowProductEnvironment extends ProductEnvironment {
  override async step(action: string) {
    await sleep(3);
    return super.step(action);
  }
}

async function child(dir: string): Promise<void> {
  tf.enableProdMode();
  await tf.setBackend('cpu');
  const policy = createBigramPolicy({ name: 'resume', optimizer: tf.train.adam(0.1) });
  const trainer = new GRPOTrainer<Product>({
    policy,
    createEnvironment: () => new SlowProductEnvironment(),
    problems: products(64, 9),
    promptsPerStep: 2,
    groupSize: 6,
    maxTurnTokens: 1,
    stepLevel: { samples: 2 },
    klCoef: 0.05,
    miniBatches: 2,
    seed: 9,
    checkpointDir: join(dir, 'checkpoints'),
    logFile: join(dir, 'metrics.jsonl'),
    onStep: (m) => void process.stdout.write(`step ${m.step}\n`),
  });
  await trainer.train(0);
  process.stdout.write(`resumed at ${trainer.stepCount}\n`);
  await trainer.train(STEPS);
  const weights = Array.from(tf.engine().registeredVariables['resume'].dataSync());
  await writeFile(join(dir, 'final.json'), JSON.stringify({ weights, metrics: trainer.metrics }));
}

function run(dir: string): { process: ChildProcess; output: () => string; exit: Promise<{ code: number | null; signal: string | null }> } {
  const script = fileURLToPath(import.meta.url);
  const proc = spawn(process.execPath, [script], { env: { ...process.env, TIRL_RESUME_CHILD: dir }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  proc.stdout!.on('data', (d) => (output += d));
  proc.stderr!.on('data', (d) => (output += d));
  const exit = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    proc.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return { process: proc, output: () => output, exit };
}

async function logSteps(dir: string): Promise<number[]> {
  try {
    const text = await readFile(join(dir, 'metrics.jsonl'), 'utf8');
    return text.split('\n').filter((l) => l.endsWith('}')).map((l) => JSON.parse(l).step);
  } catch {
    return [];
  }
}

if (process.env.TIRL_RESUME_CHILD) {
  await child(process.env.TIRL_RESUME_CHILD);
} else {
  describe('checkpoints', () => {
    before(async () => {
      await tf.setBackend('cpu');
    });

    it('a GRPO run killed mid-run resumes where it stopped and ends as an uninterrupted run', async () => {
      const root = await mkdtemp(join(tmpdir(), 'tirl-resume-'));
      try {
        const straight = join(root, 'straight');
        const killed = join(root, 'killed');
        const whole = run(straight);
        assert.deepEqual(await whole.exit, { code: 0, signal: null }, whole.output());

        const first = run(killed);
        while ((await logSteps(killed)).length < 3) {
          assert.equal(first.process.exitCode, null, `the run ended before it was killed: ${first.output()}`);
          await sleep(5);
        }
        first.process.kill('SIGKILL');
        assert.deepEqual(await first.exit, { code: null, signal: 'SIGKILL' });
        const stepsAtKill = (await logSteps(killed)).length;
        assert.ok(stepsAtKill < STEPS, 'killed before the end');

        const second = run(killed);
        assert.deepEqual(await second.exit, { code: 0, signal: null }, second.output());
        const resumedAt = Number(/resumed at (\d+)/.exec(second.output())?.[1]);
        assert.ok(resumedAt >= stepsAtKill - 1, `resumed at ${resumedAt} after ${stepsAtKill} logged steps: lost more than the step in flight`);

        const a = JSON.parse(await readFile(join(straight, 'final.json'), 'utf8'));
        const b = JSON.parse(await readFile(join(killed, 'final.json'), 'utf8'));
        assert.deepEqual(b.weights, a.weights, 'same final weights');
        assert.deepEqual(withoutTiming(b.metrics), withoutTiming(a.metrics), 'same metrics, step by step');
        assert.deepEqual(await logSteps(killed), Array.from({ length: STEPS }, (_, i) => i + 1), 'the log holds each step once');
      } finally {
        await rm(root, { recursive: true, force: true });
      }
    });

    it('a DPO run that crashes mid-round resumes inside the round', async () => {
      const root = await mkdtemp(join(tmpdir(), 'tirl-dpo-resume-'));
      const pairs: TokenPreferencePair[] = [Token.think, Token.guess, Token.brokenCode, Token.answer].map((rejected) => ({
        prompt: Int32Array.of(Token.prompt),
        chosen: Int32Array.of(Token.code),
        rejected: Int32Array.of(rejected),
      }));
      const train = async (dir: string | undefined, crashAt?: number) => {
        const policy = createBigramPolicy({ name: 'dpo-resume', optimizer: tf.train.adam(0.1) });
        const trainer = new DPOTrainer({
          policy,
          pairs: () => pairs,
          rounds: 2,
          epochsPerRound: 2,
          pairsPerStep: 2,
          seed: 4,
          ...(dir ? { checkpointDir: dir } : {}),
          onStep: (m) => {
            if (m.step === crashAt) throw new Error('crash');
          },
        });
        try {
          await trainer.train();
          return { weights: Array.from(tf.engine().registeredVariables['dpo-resume'].dataSync()), metrics: trainer.metrics };
        } finally {
          tf.engine().registeredVariables['dpo-resume'].dispose();
          policy.dispose();
        }
      };
      try {
        const straight = await train(undefined);
        await assert.rejects(train(join(root, 'ckpt'), 6), /crash/);
        const resumed = await train(join(root, 'ckpt'));
        assert.equal(resumed.metrics.length, 8);
        assert.deepEqual(resumed.weights, straight.weights);
        assert.deepEqual(
          withoutTiming(resumed.metrics) as DPOStepMetrics[],
          withoutTiming(straight.metrics) as DPOStepMetrics[],
        );
      } finally {
        await rm(root, { recursive: true, force: true });
      }
    });
  });
}

export type { GRPOStepMetrics };
