/**
 * The `tirl` command: its subcommands, exit codes and flag errors, and one tiny benchmark
 * run end to end (its JSON, Markdown and SVG outputs).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

function tirl(...args: string[]) {
  const r = spawnSync(process.execPath, [join(root, 'bin', 'tirl.js'), ...args], { cwd: root, encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('tirl command', () => {
  it('prints its usage for help, no command and --help', () => {
    for (const args of [['help'], [], ['--help']]) {
      const r = tirl(...args);
      assert.equal(r.code, 0);
      assert.match(r.stdout, /Usage: tirl <command>/);
      assert.match(r.stdout, /bench/);
    }
  });

  it('prints tirl.info() as JSON', () => {
    const r = tirl('info');
    assert.equal(r.code, 0);
    const info = JSON.parse(r.stdout) as { version: string; threads: number };
    assert.equal(info.version, '0.1.0');
    assert.ok(info.threads >= 1);
  });

  it('prints the demo usage, and rejects bad demo flags with exit code 2', () => {
    const help = tirl('demo', '--help');
    assert.equal(help.code, 0);
    assert.match(help.stdout, /usage: tirl demo/);
    for (const args of [['--bogus'], ['--steps', 'many']]) {
      const r = tirl('demo', ...args);
      assert.equal(r.code, 2, args.join(' '));
      assert.match(r.stderr, /usage: tirl demo/);
    }
  });

  it('rejects an unknown command with exit code 2', () => {
    const r = tirl('frobnicate');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /unknown command 'frobnicate'/);
  });

  it('rejects bad bench flags naming the flag', () => {
    const cases: [string[], RegExp][] = [
      [['--reps', '0'], /--reps/],
      [['--cold-reps', '1.5'], /--cold-reps/],
      [['--threads', 'two'], /--threads/],
      [['--sizes', 'huge'], /--sizes/],
      [['--cold-above=-1'], /non-negative integer \(bytes\) for --cold-above but received '-1'/],
      [['--cold-above', '2MiB'], /--cold-above but received '2MiB'/],
      [['--ops', 'noSuchOp'], /unknown op 'noSuchOp'/],
      [['--bogus'], /bogus/],
    ];
    for (const [args, message] of cases) {
      const r = tirl('bench', ...args);
      assert.equal(r.code, 2, args.join(' '));
      assert.match(r.stderr, message);
    }
    assert.match(tirl('bench', '--help').stdout, /--quick/);
  });

  it('runs a one-round benchmark and writes JSON, Markdown and SVG', () => {
    const out = mkdtempSync(join(tmpdir(), 'tirl-bench-'));
    try {
      // --quick's groupAdvantages cases all fit in a 2 MiB L2: --cold-above puts the line
      // between them (65,536 rewards of 8 B warm, the other two cold) so that both paths run.
      const coldAbove = 600_000;
      const r = tirl('bench', '--quick', '--ops', 'groupAdvantages', '--no-torch', '--reps', '1', '--cold-reps', '2', '--cold-above', String(coldAbove), '--json', '--out', out);
      assert.equal(r.code, 0, r.stderr);
      const report = JSON.parse(r.stdout) as {
        cases: {
          id: string; bytes: number; cache: string; sweepMs?: number; peers: { kind: string; medianMs: number; copyShare: number; inner: number; samples: number }[];
          threadsVsOne?: number; threadsVsOneInterval?: { low: number; high: number; confidence: number };
        }[];
        settings: { reps: number; coldReps: number; cache: { coldAboveBytes: number; coldAboveFromFlag?: boolean; sweepBytes: number; sweepThreads: number } };
        torch: string;
      };
      // The cache plan is recorded; each case says its state, cold exactly past the L2.
      const plan = report.settings.cache;
      assert.ok(plan.coldAboveBytes === coldAbove && plan.coldAboveFromFlag === true, JSON.stringify(plan));
      assert.ok(plan.sweepBytes > 0 && plan.sweepThreads >= 1, JSON.stringify(plan));
      assert.ok(report.cases.some((c) => c.cache === 'warm'), 'a warm case');
      assert.ok(report.cases.some((c) => c.cache === 'cold'), 'a cold case');
      for (const c of report.cases) {
        assert.equal(c.peers[0].kind, 'tirl');
        assert.ok(c.peers.some((p) => p.kind === 'typescript'));
        assert.equal(c.peers[c.peers.length - 1].kind, 'copy');
        assert.equal(c.cache, c.bytes > plan.coldAboveBytes ? 'cold' : 'warm', c.id);
        // A cold case: one call a sample, one sample a round (its own rounds), and its sweep's
        // time recorded.
        if (c.cache === 'cold') {
          assert.ok(c.sweepMs !== undefined && c.sweepMs > 0, `${c.id} sweepMs ${c.sweepMs}`);
          for (const p of c.peers) {
            assert.equal(p.inner, 1, `${c.id} ${p.kind}`);
            assert.equal(p.samples, report.settings.coldReps, `${c.id} ${p.kind}`);
          }
        } else {
          assert.equal(c.sweepMs, undefined, c.id);
          for (const p of c.peers) assert.equal(p.samples, report.settings.reps, `${c.id} ${p.kind}`);
        }
        for (const p of c.peers) assert.ok(p.medianMs > 0 && Number.isFinite(p.copyShare), `${c.id} ${p.kind}`);
        // "threads vs 1" and its interval over the rounds (two rounds: their range, 50%).
        const interval = c.threadsVsOneInterval;
        assert.ok(c.threadsVsOne !== undefined && interval !== undefined, c.id);
        assert.ok(interval.low <= c.threadsVsOne && c.threadsVsOne <= interval.high, `${c.id} ${JSON.stringify(c)}`);
        assert.equal(interval.confidence, c.cache === 'cold' ? 0.5 : 0, c.id);
      }
      assert.match(report.torch, /--no-torch/);
      const files = readdirSync(out).sort();
      assert.deepEqual(files.map((f) => f.replace(/cpu-\d{4}-\d{2}-\d{2}/, 'cpu-DATE')), ['cpu-DATE.json', 'cpu-DATE.md', 'cpu-DATE.svg']);
      const svg = readFileSync(join(out, files[2]), 'utf8');
      assert.match(svg, /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
      assert.match(svg, /<\/svg>\n$/);
      const markdown = readFileSync(join(out, files[1]), 'utf8');
      assert.match(markdown, /^# tirl bench, CPU/);
      assert.match(markdown, /\(set by --cold-above; `cold` in the cache column\) are timed one call at a time, each call after a sweep that reads/);
      assert.match(markdown, /\| case \| cache \| tirl ms \|/);
      assert.match(markdown, /- The summary's `threads vs 1` \(median over each case's rounds, with its 95% interval\): lowest \d+\.\d\d× \(groupAdvantages\/[^,]+, \d+\.\d\d–\d+\.\d\d× \((0|50)%\)\); \d+ below 0\.95×/);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
