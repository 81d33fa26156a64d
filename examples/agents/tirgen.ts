/**
 * TIRGen data construction with the real Python sandbox, offline: scripted generator and
 * refiner policies; steps whose code fails are dropped and drafted again, solutions whose
 * answer does not verify are not written. Writes JSONL to the path given (default
 * tirgen.jsonl in the system's temporary directory).
 *
 * Run: npx tsc -p tsconfig.json && node dist/examples/agents/tirgen.js [out.jsonl]
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ScriptedPolicy, TIRGen } from '../../lib/agents/index.js';
import { PythonSandbox, ToolRegistry, codeExecutionTool } from '../../lib/tools/index.js';

const code = (source: string): string => '```python\n' + source + '\n```';
const path = process.argv[2] ?? join(tmpdir(), 'tirgen.jsonl');
const tasks = [
  { id: 'sum-squares', prompt: 'What is the sum of the squares of 1 to 10?', gold: '385' },
  { id: 'primes', prompt: 'How many primes are below 50?', gold: '15' },
];
const generator = new ScriptedPolicy([
  // sum-squares: the first refined step has a bug; the second draft runs.
  'Add up k squared for k from 1 to 10.', 'Sum k^2 for k = 1..10.', 'The sum is \\boxed{385}.',
  // primes: the model miscounts, so the solution is not written.
  'Count the primes below 50.', 'There are \\boxed{16} primes below 50.',
]);
const refiner = new ScriptedPolicy([
  `Add up the squares.\n${code('print(sum(k ** 2 for k in range(1, 11))')}`,
  `Add up the squares.\n${code('print(sum(k ** 2 for k in range(1, 11)))')}`,
  `Count them.\n${code('print(len([n for n in range(2, 50) if all(n % d for d in range(2, n))]))')}`,
]);
const sandbox = new PythonSandbox({ timeoutMs: 5000, concurrency: 1 });
try {
  const tirgen = new TIRGen({ generator, refiner, tools: new ToolRegistry().register(codeExecutionTool(sandbox)) });
  const report = await tirgen.generate(tasks, path);
  console.log(report);
  console.log(`wrote ${report.kept} verified solution(s) to ${path}`);
} catch (error) {
  console.error(`The example needs the Python sandbox: ${(error as Error).message}`);
  process.exitCode = 1;
} finally {
  await sandbox.close();
}
