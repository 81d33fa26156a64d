/**
 * THOR's self-correction with the real Python sandbox, offline: the scripted model's first
 * step divides by zero; with `retry: 'correct'` the failed step, its error and a correction
 * stay in the trajectory and the step is written again from there (the default, THOR's
 * backtracking, samples it again from the context before it instead).
 * Needs bubblewrap (see the tools documentation); says so and stops when it is missing.
 *
 * Run: npx tsc -p tsconfig.json && node dist/examples/agents/self_correcting_agent.js
 */
import { ScriptedPolicy, SelfCorrectingAgent, type StepAttempt } from '../../lib/agents/index.js';
import { PythonSandbox, ToolRegistry, codeExecutionTool } from '../../lib/tools/index.js';

const code = (source: string): string => '```python\n' + source + '\n```';
const policy = new ScriptedPolicy([
  `The mean speed is distance over time.\n${code('distance, hours = 120, 0\nprint(distance / hours)')}`,
  `The trip took 2.5 hours, not 0.\n${code('distance, hours = 120, 2.5\nprint(distance / hours)')}`,
  'The mean speed is \\boxed{48} km/h.',
]);
const sandbox = new PythonSandbox({ timeoutMs: 5000, concurrency: 1 });
try {
  const agent = new SelfCorrectingAgent({ policy, tools: new ToolRegistry().register(codeExecutionTool(sandbox)), maxBacktracks: 2, retry: 'correct' });
  const trajectory = await agent.run({ prompt: 'A car drives 120 km in 2.5 hours. What is its mean speed in km/h?', gold: '48' });
  for (const attempt of trajectory.metadata!.attempts as StepAttempt[]) {
    const outcome = attempt.response === undefined ? 'no code' : `${attempt.response.status}: ${attempt.response.text.trim().split('\n').at(-1)}`;
    console.log(`step ${attempt.step + 1} attempt ${attempt.attempt + 1}${attempt.backtracked ? ' (backtracked)' : ''} -> ${outcome}`);
  }
  console.log(`kept ${trajectory.turns.length} steps; answer ${trajectory.metadata!.answer}, reward ${trajectory.reward}`);
} catch (error) {
  console.error(`The example needs the Python sandbox: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await sandbox.close();
}
