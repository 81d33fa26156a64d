import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';

import { calculate, resolveReferences } from '../app/demo/calculator.js';
import { ArithmeticEnvironment, isVoidAction } from '../app/demo/environment.js';
import { DEFAULT_CONFIG, parseDemoArgs } from '../app/demo/index.js';
import { ProblemSplits, drawProblem } from '../app/demo/problems.js';
import { SeededRandom } from '../lib/training/random.js';
import { propose, refine } from '../app/demo/tirgen.js';
import { decode, encode } from '../app/demo/vocab.js';
import { Role } from '../lib/index.js';

const run = promisify(execFile);

let llamaCppInstalled = true;
try {
  await import('node-llama-cpp' as string);
} catch {
  llamaCppInstalled = false;
}

describe('demo calculator', () => {
  it('computes exactly, with precedence and parentheses', () => {
    assert.deepEqual(calculate('347*29'), { ok: true, value: 10063n });
    assert.deepEqual(calculate('12+7*45'), { ok: true, value: 327n });
    assert.deepEqual(calculate('(12+7)*45'), { ok: true, value: 855n });
    assert.deepEqual(calculate('99999999*99999999'), { ok: true, value: 9999999800000001n });
    assert.deepEqual(calculate('-3--4'), { ok: true, value: 1n });
    assert.deepEqual(calculate('84/4'), { ok: true, value: 21n });
  });

  it('reports malformed expressions instead of throwing', () => {
    for (const bad of ['', '(1+2', '1+', '*3', '1/0', '7/2', '1 2', 'x', '('.repeat(70)]) {
      const result = calculate(bad);
      assert.equal(result.ok, false, bad);
    }
  });

  it('resolves references to the question and the last result', () => {
    assert.deepEqual(resolveReferences('#1*#2+#r', { quantities: ['12', '5'], lastResult: '7' }), { ok: true, value: '12*5+7' });
    assert.equal(resolveReferences('#3', { quantities: ['1'] }).ok, false);
    assert.equal(resolveReferences('#r', { quantities: [] }).ok, false);
  });
});

describe('demo environment', () => {
  const problem = drawProblem(new SeededRandom(3));

  it('runs a tool call, feeds its output back and rewards the exact answer', () => {
    const env = new ArithmeticEnvironment();
    assert.equal(env.reset(problem), problem.text);
    const call = env.step(`<calc> ${problem.expression} </calc>`);
    assert.equal(call.done, false);
    assert.deepEqual(call.tool, { name: 'calculator', status: 'success' });
    assert.equal(call.feedback, `<out> ${problem.answer} </out>`);
    const answer = env.step('<ans> #r </ans>');
    assert.deepEqual({ done: answer.done, reward: answer.reward, success: answer.success }, { done: true, reward: 1, success: true });
  });

  it('reports failed tool calls and wrong answers', () => {
    const env = new ArithmeticEnvironment();
    env.reset(problem);
    const failed = env.step('<calc> (#1 </calc>');
    assert.equal(failed.tool?.status, 'error');
    assert.equal(failed.feedback, '<out> <err> </out>');
    const wrong = env.step('<ans> 1 </ans>');
    assert.equal(wrong.reward, 0);
    assert.equal(wrong.success, false);
  });

  it('ends the episode at a void turn (neither a complete tool call nor an answer)', () => {
    for (const action of ['<calc> #1*#2', '#1*#2 </calc>', '<ans> #r', 'what is', '<calc> </calc>', '', 'not in vocabulary']) {
      assert.equal(isVoidAction(action), true, action);
      const env = new ArithmeticEnvironment();
      env.reset(problem);
      assert.equal(env.step(action).done, true);
    }
    assert.equal(isVoidAction('<calc> #1*#2 </calc>'), false);
    assert.equal(isVoidAction('<ans> 42 </ans>'), false);
  });

  it('encodes and decodes actions losslessly', () => {
    for (const text of ['<calc> #1*#2-#3 </calc>', '<ans> 10063 </ans>', '<out> 780 </out>']) {
      assert.equal(decode(encode(text)), text);
    }
  });
});

describe('demo problems and warm-start data', () => {
  it('keeps held-out problems out of training', () => {
    const splits = new ProblemSplits(5, { validationSize: 30, testSize: 60 });
    const heldOut = new Set([...splits.test, ...splits.validation].map((p) => p.text));
    for (let i = 0; i < 2000; i++) assert.equal(heldOut.has(splits.nextTrain().text), false);
  });

  it('refines proposals: only traces whose calls ran and whose answer checks', () => {
    const rng = new SeededRandom(9);
    let kept = 0;
    for (let i = 0; i < 300; i++) {
      const problem = drawProblem(rng);
      const proposal = propose(problem, rng);
      const trace = refine(problem, proposal);
      if (!trace) continue;
      kept++;
      // Replaying the trace's actions must solve the problem with every call succeeding.
      const env = new ArithmeticEnvironment();
      env.reset(problem);
      const actions = decode(trace.tokens.filter((_, t) => trace.roles[t] === Role.action)).split(/(?<=<\/calc>|<\/ans>) /);
      const results = actions.map((a) => env.step(a));
      assert.ok(results.every((r) => r.tool === undefined || r.tool.status === 'success'));
      assert.equal(results[results.length - 1].success, true);
    }
    assert.ok(kept > 100 && kept < 300, `kept ${kept}`);
  });
});

describe('tirl demo', () => {
  it('parses its flags', () => {
    assert.deepEqual(parseDemoArgs([]), DEFAULT_CONFIG);
    const quick = parseDemoArgs(['--quick', '--seed', '4', '--no-void-filter', '--json', '--out', 'x']);
    assert.ok(quick !== 'help');
    assert.equal(quick.seed, 4);
    assert.equal(quick.voidFilter, false);
    assert.equal(quick.json, true);
    assert.equal(quick.out, 'x');
    assert.equal(parseDemoArgs(['--help']), 'help');
    assert.throws(() => parseDemoArgs(['--steps', '2.5']), RangeError);
    assert.throws(() => parseDemoArgs(['--bogus']), TypeError);
  });

  it('parses the llama.cpp engine flags, and refuses them without the engine', () => {
    const llama = parseDemoArgs(['--engine', 'llama.cpp', '--engine-weights', 'f16', '--sync-every', '2', '--max-staleness', '1', '--no-rollout-correction']);
    assert.ok(llama !== 'help');
    assert.deepEqual(
      { engine: llama.engine, engineWeights: llama.engineWeights, syncEvery: llama.syncEvery, maxStaleness: llama.maxStaleness, rolloutCorrection: llama.rolloutCorrection, rlSteps: llama.rlSteps },
      { engine: 'llama.cpp', engineWeights: 'f16', syncEvery: 2, maxStaleness: 1, rolloutCorrection: false, rlSteps: 60 },
    );
    assert.throws(() => parseDemoArgs(['--sync-every', '2']), { name: 'RangeError', message: /--sync-every needs --engine llama\.cpp/ });
    assert.throws(() => parseDemoArgs(['--engine', 'vllm']), { name: 'RangeError', message: /--engine/ });
    assert.throws(() => parseDemoArgs(['--engine', 'llama.cpp', '--engine-weights', 'bf16']), { name: 'RangeError', message: /--engine-weights/ });
    assert.throws(() => parseDemoArgs(['--engine', 'llama.cpp', '--sync-every', '0']), { name: 'RangeError', message: /--sync-every/ });
  });

  it('runs end to end (--quick --json) and writes its log, chart and summary', { timeout: 300_000 }, async () => {
    const out = mkdtempSync(join(tmpdir(), 'tirl-demo-'));
    try {
      const entry = new URL('../app/demo/index.js', import.meta.url).href;
      const script = `import { runDemo } from '${entry}'; await runDemo(process.argv.slice(1));`; // node -e puts the arguments after argv[0]
      const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script, '--', '--quick', '--json', '--out', out]);
      const summary = JSON.parse(stdout.trim().split('\n').pop()!);
      for (const key of ['warmStartSuccess', 'rlSuccess', 'seconds', 'voidFilteredFraction']) {
        assert.equal(typeof summary[key], 'number', key);
      }
      assert.ok(summary.warmStartSuccess >= 0 && summary.warmStartSuccess <= 1);
      assert.ok(summary.rlSuccess >= 0 && summary.rlSuccess <= 1);
      // The same weights sample and score: the rollout/trainer mismatch is float rounding only.
      assert.ok(summary.maxRolloutTrainerKl >= 0 && summary.maxRolloutTrainerKl < 1e-5, `rollout/trainer KL ${summary.maxRolloutTrainerKl}`);
      assert.deepEqual(summary, JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8')));
      assert.equal(readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').length, summary.rlSteps);
      assert.equal(readFileSync(join(out, 'chart.png')).subarray(1, 4).toString(), 'PNG');
      assert.ok(readFileSync(join(out, 'chart.svg'), 'utf8').startsWith('<svg'));
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });

  it('--engine llama.cpp runs end to end: llama.cpp samples, the mismatch is measured, weights sync every step', { timeout: 300_000, skip: llamaCppInstalled ? false : 'node-llama-cpp is not installed' }, async () => {
    const out = mkdtempSync(join(tmpdir(), 'tirl-demo-llama-'));
    try {
      const cli = fileURLToPath(new URL('../../bin/tirl.js', import.meta.url));
      const { stdout } = await run(process.execPath, [cli, 'demo', '--engine', 'llama.cpp', '--quick', '--steps', '2', '--json', '--out', out]);
      const summary = JSON.parse(stdout.trim().split('\n').pop()!);
      assert.equal(summary.engine, 'llama.cpp');
      assert.equal(summary.rlSteps, 2);
      assert.equal(summary.syncs, 2);
      for (const key of ['engineSampling', 'trainer', 'sync', 'warmStart', 'evaluation']) assert.ok(summary.time[key] >= 0, key);
      // f32 engine weights and KV cache: llama.cpp and tfjs differ by float rounding only.
      assert.ok(Math.abs(summary.mismatch.maxKl) < 1e-5, `KL(llama.cpp || tfjs) ${summary.mismatch.maxKl}`);
      assert.ok(summary.mismatch.maxAbsLogpDiff < 1e-3, `max |dlogp| ${summary.mismatch.maxAbsLogpDiff}`);
      assert.deepEqual(summary.staleness, { mean: 0, max: 0 });
      assert.deepEqual(summary, JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8')));
      const lines = readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((line) => JSON.parse(line));
      assert.equal(lines.length, 2);
      assert.equal(lines[0].rolloutCorrection.applied, true);
      assert.equal(readFileSync(join(out, 'chart.png')).subarray(1, 4).toString(), 'PNG');
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });

  it('--engine llama.cpp without node-llama-cpp fails naming the package', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tirl-demo-nollama-'));
    try {
      const hooks = join(dir, 'hooks.mjs');
      writeFileSync(hooks, `export async function resolve(specifier, context, next) {
  if (specifier === 'node-llama-cpp') throw Object.assign(new Error("Cannot find package 'node-llama-cpp'"), { code: 'ERR_MODULE_NOT_FOUND' });
  return next(specifier, context);
}\n`);
      const register = join(dir, 'register.mjs');
      writeFileSync(register, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);
      const cli = fileURLToPath(new URL('../../bin/tirl.js', import.meta.url));
      const result = spawnSync(process.execPath, ['--import', pathToFileURL(register).href, cli, 'demo', '--engine', 'llama.cpp', '--quick', '--out', join(dir, 'out')], { encoding: 'utf8' });
      assert.notEqual(result.status, 0);
      assert.match(result.stderr, /optional package 'node-llama-cpp'/);
      assert.match(result.stderr, /npm install node-llama-cpp@3\.21\.1/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
