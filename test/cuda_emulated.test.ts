/**
 * The GPU tests of cuda.test.ts, run where there is no GPU against a host emulation of the
 * CUDA library (build/test/libtirl_host_backend.so, loaded through TIRL_CUDA_LIBRARY): its
 * "device" memory is host memory and its kernels are the CPU kernels. This checks all
 * that lies between JavaScript and the CUDA kernels (device arrays, the bindings' device
 * paths, the core forwarding CUDA devices) on every machine; the kernels themselves are
 * checked on a GPU by benchmarks/gpu/run.sh.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const backend = join(root, 'build', 'test', 'libtirl_host_backend.so');
const skip = existsSync(backend) ? false : `no host emulation built at ${backend} (npm run build)`;

describe('cuda tests against the host emulation', { skip }, () => {
  it('runs every device test, none skipped, all passing', () => {
    // A fresh test runner: without the parent's NODE_TEST_CONTEXT, which would mute it.
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    const run = spawnSync(process.execPath, ['--test', join(root, 'dist', 'test', 'cuda.test.js')], {
      env: { ...env, TIRL_CUDA_LIBRARY: backend },
      encoding: 'utf8',
      timeout: 120_000,
    });
    const output = `${run.stdout}${run.stderr}`;
    assert.equal(run.status, 0, output);
    // Only the suite for machines without CUDA may be skipped.
    const skipped = output.split('\n').filter((line) => /# SKIP/.test(line));
    assert.deepEqual(skipped.map((line) => line.replace(/^\s*ok \d+ - /, '').replace(/ # SKIP.*/, '')), ['cuda unavailable'], output);
    assert.match(output, /# fail 0/);
  });
});
