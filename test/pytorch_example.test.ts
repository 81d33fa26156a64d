/**
 * Runs the PyTorch example's own checks (examples/pytorch/test_tirl_torch.py: tirl's kernels
 * as torch.autograd.Functions through the C ABI, against PyTorch's formulas). Skipped, with
 * the reason, when Python, PyTorch or libtirl is missing.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { it } from 'node:test';

const root = fileURLToPath(new URL('../..', import.meta.url));
const python = process.env.TIRL_PYTHON ?? '/usr/bin/python3';
/** The exit status by which the script says it cannot run here. */
const SKIP = 77;

it('the PyTorch autograd functions match PyTorch on its own formulas', (t) => {
  if (!existsSync(python)) return t.skip(`no Python at ${python} (set TIRL_PYTHON)`);
  const run = spawnSync(python, ['examples/pytorch/test_tirl_torch.py'], {
    cwd: root,
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', OMP_NUM_THREADS: '1' },
  });
  const output = `${run.stdout}${run.stderr}`;
  if (run.status === SKIP) return t.skip(output.trim());
  assert.equal(run.status, 0, output);
  t.diagnostic(output.trim().split('\n').slice(-3).join(' | '));
});
