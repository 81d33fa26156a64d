/**
 * The package root exports the training API without loading TensorFlow.js (an optional
 * peer dependency); `tirl/tfjs` is where tfjs comes in.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { it } from 'node:test';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** Imports `specifier` in a child whose module resolution refuses any @tensorflow package. */
function importWithoutTfjs(specifier: string): { status: number | null; output: string } {
  const dir = mkdtempSync(join(tmpdir(), 'tirl-exports-'));
  try {
    const hooks = join(dir, 'hooks.mjs');
    writeFileSync(
      hooks,
      `export async function resolve(specifier, context, next) {
  if (specifier.startsWith('@tensorflow/')) throw new Error('@tensorflow imported by ' + context.parentURL);
  return next(specifier, context);
}\n`,
    );
    const register = join(dir, 'register.mjs');
    writeFileSync(register, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);
    const script = `const m = await import(${JSON.stringify(specifier)}); console.log(['GRPOTrainer', 'DPOTrainer', 'tokenLogprobs'].filter((k) => k in m).join(','));`;
    const run = spawnSync(process.execPath, ['--import', pathToFileURL(register).href, '--input-type=module', '-e', script], {
      cwd: root,
      encoding: 'utf8',
    });
    return { status: run.status, output: `${run.stdout}${run.stderr}` };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

it('the package root exports the trainers and does not load tfjs', () => {
  const { status, output } = importWithoutTfjs('tirl');
  assert.equal(status, 0, output);
  assert.match(output, /GRPOTrainer,DPOTrainer,tokenLogprobs/);
});

it('tirl/tfjs is the subpath that loads tfjs', () => {
  const { status, output } = importWithoutTfjs('tirl/tfjs');
  assert.notEqual(status, 0);
  assert.match(output, /@tensorflow imported by .*training\/tfjs_(ops|policy)\.js/);
});
