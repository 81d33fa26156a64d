/**
 * Proof of a real install: pack the package, install the tarball into an empty folder
 * with no compiler on PATH (with install scripts on, then off), import it by name and
 * check a result. The prebuild in prebuilds/ must be what loads.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, it, before, after } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const prebuildDir = join(root, 'prebuilds', `${process.platform}-${process.arch}`);
const skip = existsSync(prebuildDir) ? false : `no prebuild for ${process.platform}-${process.arch} (run npm run prebuild)`;

/** A PATH with node, npm and a shell only: no cc, c++, make or cmake. */
function compilerFreePath(dir: string): string {
  const bin = join(dir, 'bin');
  mkdirSync(bin);
  const nodeBin = dirname(process.execPath);
  for (const tool of ['node', 'npm', 'npx']) symlinkSync(join(nodeBin, tool), join(bin, tool));
  for (const tool of ['sh', 'env']) symlinkSync(join('/usr/bin', tool), join(bin, tool));
  return bin;
}

const check = `
import { feedbackMask, info } from 'tirl';
const r = feedbackMask({ roles: Uint8Array.from([0, 1, 2, 1]), seqOffsets: Int32Array.from([0, 4]) });
if (r.mask.join() !== '0,1,0,1' || r.actionTokens[0] !== 2) throw new Error('wrong result ' + r.mask.join());
const { createRequire } = await import('node:module');
const loaded = Object.keys(createRequire(import.meta.url).cache).find((k) => k.endsWith('.node')) ?? '';
console.log(JSON.stringify({ version: info().version, loaded }));
`;

describe('package', { skip, timeout: 300_000 }, () => {
  let work: string;
  let tarball: string;
  before(() => {
    work = mkdtempSync(join(tmpdir(), 'tirl-pack-'));
    execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', work], { cwd: root, stdio: 'pipe' });
    tarball = join(work, readdirSync(work).find((f) => f.endsWith('.tgz'))!);
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  for (const ignoreScripts of [false, true]) {
    // The second install also leaves out the optional dependencies (node-llama-cpp and its
    // ~700 MB of platform binaries, resvg's binding): the core loads without them, and the
    // test does not unpack them twice.
    it(`installs from the tarball without a compiler${ignoreScripts ? ', with --ignore-scripts and --omit=optional' : ''}`, () => {
      const dir = mkdtempSync(join(work, 'app-'));
      const env = { ...process.env, PATH: compilerFreePath(dir), npm_config_loglevel: 'error' };
      execFileSync('npm', ['init', '-y'], { cwd: dir, env, stdio: 'pipe' });
      const args = ['install', '--no-audit', '--no-fund', tarball];
      if (ignoreScripts) args.push('--ignore-scripts', '--omit=optional');
      execFileSync('npm', args, { cwd: dir, env, stdio: 'pipe' });
      const out = execFileSync('node', ['--input-type=module', '-e', check], { cwd: dir, env, encoding: 'utf8' });
      const result = JSON.parse(out.trim()) as { version: string; loaded: string };
      assert.match(result.loaded, /node_modules\/tirl\/prebuilds\//);
      assert.equal(result.version, '0.1.0');
    });
  }
});
