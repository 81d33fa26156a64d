/**
 * The bench's cache state (benchmarks/cache.ts, harness.ts): the cache sizes read from
 * sysfs, the plan that picks which cases are timed cold, the sweep that evicts the caches,
 * and the harness's cold path (a sweep before each timed call of every peer, one call a
 * sample) beside its warm one. No timing is asserted: only what runs, in which order.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  CacheSweeper,
  FALLBACK_L2_BYTES,
  FALLBACK_LLC_BYTES,
  MAX_SWEEP_BYTES,
  MAX_SWEEP_THREADS,
  cachePlan,
  cpuCaches,
  parseCacheSize,
} from '../benchmarks/cache.js';
import { firstSequences } from '../benchmarks/data.js';
import { dpoCase } from '../benchmarks/dpo_loss.js';
import { arithmeticMsOf, cCallPeer, currentThreads, measureCase, medianRatio, medianRatioInterval, syncPeer, type BenchCase, type CCalls, type Peer } from '../benchmarks/harness.js';
import { SCALING_PASSES, measureScaling } from '../benchmarks/scaling.js';
import { startTorch } from '../benchmarks/torch.js';
import { setThreads } from '../lib/index.js';

const MiB = 2 ** 20;

/** A sweeper that logs each eviction into `log` before doing it. */
class LoggingSweeper extends CacheSweeper {
  constructor(
    private readonly log: string[],
    bytes: number,
    threads: number,
  ) {
    super(bytes, threads);
  }

  override evict(): number {
    this.log.push('evict');
    return super.evict();
  }
}

/** A case of `bytes` whose peers log their calls; `withCold` adds a peer that evicts itself. */
function loggingCase(bytes: number, log: string[], withCold: boolean): BenchCase {
  return {
    op: 'test',
    id: `test/${bytes}`,
    title: 'logging case',
    sizes: ['quick'],
    bytes,
    byteModel: 'none',
    setup() {
      const data = new Float64Array(1024);
      const peers: Peer[] = [
        syncPeer('ours', 'tirl', () => {
          log.push('tirl');
          data.fill(1);
        }),
        syncPeer('plain', 'typescript', () => {
          log.push('typescript');
          data.fill(2);
        }),
      ];
      if (withCold) {
        const remote = syncPeer('remote', 'torch', () => log.push('torch'));
        peers.push({
          ...remote,
          async sampleCold() {
            log.push('torch-evict');
            return remote.sample(1);
          },
        });
      }
      return { peers };
    },
  };
}

const options = { threads: 1, reps: 3, warmup: 1, minSampleSeconds: 0.001, caseBudgetSeconds: 30, scaling: false };

describe('bench cache sizes', () => {
  it('parses sysfs sizes and rejects anything else', () => {
    assert.equal(parseCacheSize('48K'), 48 * 1024);
    assert.equal(parseCacheSize('2048K\n'), 2 * MiB);
    assert.equal(parseCacheSize('300M'), 300 * MiB);
    assert.equal(parseCacheSize('1G'), 2 ** 30);
    assert.equal(parseCacheSize('512'), 512);
    for (const bad of ['', 'K', '0K', '-4K', '3.5M', '12 KB', 'big']) assert.equal(parseCacheSize(bad), undefined, bad);
  });

  it('reads data and unified caches from a sysfs tree, skipping instruction caches and broken entries', () => {
    const root = mkdtempSync(join(tmpdir(), 'tirl-cache-'));
    try {
      const entry = (name: string, fields: Record<string, string>) => {
        mkdirSync(join(root, name));
        for (const [field, value] of Object.entries(fields)) writeFileSync(join(root, name, field), `${value}\n`);
      };
      entry('index3', { level: '3', type: 'Unified', size: '307200K' });
      entry('index0', { level: '1', type: 'Data', size: '48K' });
      entry('index1', { level: '1', type: 'Instruction', size: '32K' });
      entry('index2', { level: '2', type: 'Unified', size: '2048K' });
      entry('index4', { level: '4' }); // no type or size
      mkdirSync(join(root, 'power'));
      assert.deepEqual(cpuCaches(root), [
        { level: 1, type: 'Data', bytes: 48 * 1024 },
        { level: 2, type: 'Unified', bytes: 2 * MiB },
        { level: 3, type: 'Unified', bytes: 300 * MiB },
      ]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
    assert.deepEqual(cpuCaches(join(tmpdir(), 'tirl-no-such-cache-dir')), []);
  });

  it('plans cold timing past the L2 with a sweep of twice the last-level cache, capped, with fallbacks', () => {
    const xeon = [
      { level: 1, type: 'Data', bytes: 48 * 1024 },
      { level: 2, type: 'Unified', bytes: 2 * MiB },
      { level: 3, type: 'Unified', bytes: 300 * MiB },
    ];
    const plan = cachePlan(xeon, 2);
    assert.equal(plan.coldAboveBytes, 2 * MiB);
    assert.equal(plan.lastLevelBytes, 300 * MiB);
    assert.equal(plan.sweepBytes, 600 * MiB);
    assert.equal(plan.sweepThreads, 2);
    assert.match(plan.source, /L2 2048 KiB, L3 300 MiB/);

    const huge = cachePlan([{ level: 2, type: 'Unified', bytes: MiB }, { level: 3, type: 'Unified', bytes: 1024 * MiB }], 256);
    assert.equal(huge.sweepBytes, MAX_SWEEP_BYTES);
    assert.equal(huge.sweepThreads, MAX_SWEEP_THREADS);

    const unknown = cachePlan([], 1);
    assert.equal(unknown.coldAboveBytes, FALLBACK_L2_BYTES);
    assert.equal(unknown.sweepBytes, 2 * FALLBACK_LLC_BYTES);
    assert.equal(unknown.sweepThreads, 1);
    assert.match(unknown.source, /unknown/);

    const real = cachePlan();
    assert.ok(real.coldAboveBytes > 0 && real.sweepBytes >= 2 * MiB && real.sweepBytes <= MAX_SWEEP_BYTES, JSON.stringify(real));
  });
});

describe('bench cache sweep', () => {
  it('sweeps on one thread and on several, repeatedly, and rejects bad sizes', async () => {
    for (const threads of [1, 3]) {
      const sweeper = new CacheSweeper(MiB + 100, threads);
      try {
        assert.equal(sweeper.bytes, MiB + 64);
        assert.equal(sweeper.threads, threads);
        for (let i = 0; i < 5; i++) {
          const seconds = sweeper.evict();
          assert.ok(seconds >= 0 && Number.isFinite(seconds));
        }
      } finally {
        await sweeper.close();
      }
    }
    assert.equal(new CacheSweeper(128, 8).threads, 2); // never more threads than cache lines
    assert.throws(() => new CacheSweeper(10, 1), { name: 'RangeError', message: /at least 64 for bytes but received 10/ });
    assert.throws(() => new CacheSweeper(MiB, 0), { name: 'RangeError', message: /positive integer for threads but received 0/ });
    assert.throws(() => new CacheSweeper(NaN, 1), RangeError);
  });
});

describe('bench harness arithmetic alone', () => {
  it("cuts a batch's options at its first sequences: tokens, sequences (in every block), offsets, outputs", () => {
    const seqOffsets = Int32Array.of(0, 3, 5, 9);
    const options = {
      logp: Float32Array.from({ length: 9 }, (_, i) => i),
      rewards: Float32Array.of(10, 11, 12, 20, 21, 22), // two components of three sequences
      baselines: Float32Array.of(1, 2, 3),
      weights: Float32Array.of(0.5, 2),
      seqOffsets,
      gamma: 0.9,
      out: { advantages: new Float32Array(9) },
    };
    const head = firstSequences(options, seqOffsets, 2);
    assert.deepEqual([...head.logp], [0, 1, 2, 3, 4]);
    assert.equal(head.logp.buffer, options.logp.buffer, 'a view');
    assert.deepEqual([...head.rewards], [10, 11, 20, 21]);
    assert.deepEqual([...head.baselines], [1, 2]);
    assert.deepEqual([...head.weights], [0.5, 2]);
    assert.deepEqual([...head.seqOffsets], [0, 3, 5]);
    assert.equal(head.gamma, 0.9);
    assert.equal(head.out.advantages.length, 5);
  });

  it('takes the median difference a unit, scaled to the case and divided by the threads', () => {
    // Differences of 0.8 ms (outliers either side) for slices of 2 and 4 units: 0.4 ms a
    // unit, 30 units over 2 threads.
    assert.equal(arithmeticMsOf([0.0008, 0.0002, 0.0008, 0.005, 0.0008], 2, 30, 2), 6);
    assert.equal(arithmeticMsOf([0.001, 0.003], 1, 10, 1), 20);
  });

  it("gives 'threads vs 1' as the median of the rounds' ratios, not the ratio of the medians", () => {
    // Rounds of (1 thread, 2 threads): the medians, 4 and 2, give 2; the rounds' ratios
    // 1.5, 2, 0.5, 1.25, 0.8 have the median 1.25.
    assert.equal(medianRatio([3, 4, 1, 5, 4], [2, 2, 2, 4, 5]), 1.25);
    assert.equal(medianRatio([2, 6], [1, 2]), 2.5);
    assert.throws(() => medianRatio([1], [1, 2]), /^RangeError: medianRatio: Expected two equal, non-empty lengths but received 1 and 2$/);
  });

  it("gives the median's interval from the rounds' order statistics, its coverage exact", () => {
    // 10 rounds: [x_(2), x_(9)] misses the median with probability 2 P(B <= 1), B ~
    // Binomial(10, 1/2): 2 * 11 / 1024; [x_(3), x_(8)] would miss it with 2 * 56 / 1024 > 5%.
    const one = [10, 9, 8, 7, 6, 5, 4, 3, 2, 1];
    const ten = medianRatioInterval(one, one.map(() => 10));
    assert.deepEqual(ten, { low: 0.2, high: 0.9, confidence: 1 - 22 / 1024 });
    // 135 rounds (a cold case of the full bench): the 56th smallest and largest (Binomial(135, 1/2)).
    const ratios = Array.from({ length: 135 }, (_, i) => 1 + i / 1000);
    const cold = medianRatioInterval(ratios, ratios.map(() => 1));
    assert.ok(Math.abs(cold.low - 1.055) < 1e-12 && Math.abs(cold.high - 1.079) < 1e-12, JSON.stringify(cold));
    assert.ok(cold.confidence >= 0.95 && cold.confidence < 0.97, JSON.stringify(cold));
    assert.ok(cold.low <= medianRatio(ratios, ratios.map(() => 1)) && medianRatio(ratios, ratios.map(() => 1)) <= cold.high);
    // Fewer than 6 rounds cannot reach 95%: the whole range, with the coverage it has.
    assert.deepEqual(medianRatioInterval([3, 1, 2, 5, 4], [1, 1, 1, 1, 1]), { low: 1, high: 5, confidence: 1 - 2 / 32 });
    assert.deepEqual(medianRatioInterval([2], [4]), { low: 0.5, high: 0.5, confidence: 0 });
    assert.throws(() => medianRatioInterval([], []), /^RangeError: medianRatioInterval: Expected two equal, non-empty lengths but received 0 and 0$/);
  });

  it('times the slices of u and 2u units on one thread, then restores the threads', async () => {
    const units: number[] = [];
    const threadsSeen = new Set<number>();
    const benchCase: BenchCase = {
      ...loggingCase(MiB, [], false),
      setup() {
        return {
          ...loggingCase(MiB, [], false).setup(),
          arithmetic: { slice: (u: number) => () => (units.push(u), threadsSeen.add(currentThreads())), units: 2, total: 30 },
        };
      },
    };
    const before = currentThreads();
    const result = await measureCase(benchCase, { ...options, threads: before }, undefined, undefined, () => {});
    assert.deepEqual([...new Set(units)].sort(), [2, 4]);
    assert.deepEqual([...threadsSeen], [1]);
    assert.ok(result.arithmeticMs !== undefined && Number.isFinite(result.arithmeticMs), `arithmeticMs ${result.arithmeticMs}`);
    assert.equal(currentThreads(), before);
  });
});

describe('bench harness C-call peer', () => {
  it("takes a sample from the C calls' own clocks, summed over the op's calls, each given its options and the sample's calls", () => {
    const seen: [object, number][] = [];
    const loop = (wall: number, cpu: number): CCalls => (options, calls, times) => {
      seen.push([options, calls]);
      times![0] = wall;
      times![1] = cpu;
    };
    const first = { a: 1 };
    const second = { b: 2 };
    const peer = cCallPeer([[loop(0.5, 0.25), first], [loop(0.125, 0.5), second]]);
    assert.equal(peer.kind, 'c-abi');
    assert.deepEqual(peer.sample(7), { wall: 0.625, cpu: 0.75 });
    assert.equal(seen.length, 2);
    assert.equal(seen[0][0], first);
    assert.equal(seen[1][0], second);
    assert.deepEqual(seen.map(([, calls]) => calls), [7, 7]);
  });

  it("is a row of an op's case, timing the same call natively (dpoLoss)", async () => {
    const peers = dpoCase(64).setup().peers;
    const cCall = peers.find((p) => p.kind === 'c-abi');
    assert.ok(cCall, peers.map((p) => p.kind).join(' '));
    const sample = await cCall.sample(3);
    assert.ok(sample.wall > 0 && sample.wall < 1 && sample.cpu >= 0, JSON.stringify(sample));
  });
});

describe('bench harness cache state', () => {
  it('times a case past the threshold one call per sample, each after a sweep; a peer in another process sweeps itself', async () => {
    const log: string[] = [];
    const sweeper = new LoggingSweeper(log, MiB, 2);
    try {
      const result = await measureCase(
        loggingCase(4 * MiB, log, true),
        { ...options, cache: { coldAboveBytes: 2 * MiB, sweeper } },
        undefined,
        undefined,
        (message) => {
          if (message.includes('round')) log.push('round');
        },
      );
      assert.equal(result.cache, 'cold');
      assert.ok(result.sweepMs !== undefined && result.sweepMs >= 0, `sweepMs ${result.sweepMs}`);
      assert.deepEqual(
        result.peers.map((p) => [p.kind, p.inner, p.samples]),
        [
          ['tirl', 1, 3],
          ['typescript', 1, 3],
          ['torch', 1, 3],
          ['copy', 1, 3],
        ],
      );
      // After the warm-up, each timed call of ours (the copy logs nothing) follows a sweep:
      // the harness's for our peers and the copy, the peer's own for the other process.
      const rounds = log.slice(log.indexOf('round')).filter((e) => e !== 'round');
      const calls = rounds.filter((e) => e === 'tirl' || e === 'typescript' || e === 'torch');
      assert.equal(calls.length, 9);
      for (let i = 0; i < rounds.length; i++) {
        if (rounds[i] === 'tirl' || rounds[i] === 'typescript') assert.equal(rounds[i - 1], 'evict', `${i}: ${rounds.join(' ')}`);
        if (rounds[i] === 'torch') assert.equal(rounds[i - 1], 'torch-evict', `${i}: ${rounds.join(' ')}`);
      }
      // Four peers a round, three rounds: one harness sweep per peer but the self-sweeping one.
      assert.equal(rounds.filter((e) => e === 'evict').length, 9);
      assert.equal(rounds.filter((e) => e === 'torch-evict').length, 3);
    } finally {
      await sweeper.close();
    }
  });

  it('sets the one-thread row\'s thread count before the sweep, so that nothing runs between the sweep and the timed call', async () => {
    const log: string[] = [];
    const threadsLog: string[] = [];
    const sweeper = new (class extends LoggingSweeper {
      override evict(): number {
        threadsLog.push(`evict@${currentThreads()}`);
        return super.evict();
      }
    })(log, MiB, 1);
    const benchCase = loggingCase(4 * MiB, log, false);
    const setup = benchCase.setup;
    benchCase.setup = () => {
      const prepared = setup();
      const ours = prepared.peers[0];
      prepared.peers[0] = { ...ours, sample: (inner) => (threadsLog.push(`call@${currentThreads()}`), ours.sample(inner)) };
      return prepared;
    };
    const restore = currentThreads();
    setThreads(2); // ours runs at the count it finds: the bench's own
    try {
      const result = await measureCase(benchCase, { ...options, threads: 2, scaling: true, cache: { coldAboveBytes: 2 * MiB, sweeper } }, undefined, undefined, () => {});
      assert.deepEqual(result.peers.map((p) => p.kind), ['tirl', 'tirl-1thread', 'typescript', 'copy']);
      // Every sweep before one of our calls ran at that call's thread count (1 or 2, both seen).
      const ours = threadsLog.flatMap((e, i) => (e.startsWith('call') && i > 0 && threadsLog[i - 1].startsWith('evict') ? [[threadsLog[i - 1], e]] : []));
      assert.equal(ours.length, 6, threadsLog.join(' '));
      for (const [evict, call] of ours) assert.equal(evict.slice('evict'.length), call.slice('call'.length), threadsLog.join(' '));
      assert.deepEqual([...new Set(ours.map(([, call]) => call))].sort(), ['call@1', 'call@2']);
    } finally {
      setThreads(restore);
      await sweeper.close();
    }
  });

  it('runs a cold case for coldReps rounds and a warm one for reps', async () => {
    const log: string[] = [];
    const sweeper = new LoggingSweeper(log, MiB, 1);
    try {
      const withRounds = { ...options, reps: 3, coldReps: 5, cache: { coldAboveBytes: 2 * MiB, sweeper } };
      const cold = await measureCase(loggingCase(4 * MiB, log, false), withRounds, undefined, undefined, () => {});
      assert.deepEqual(cold.peers.map((p) => [p.kind, p.samples]), [['tirl', 5], ['typescript', 5], ['copy', 5]]);
      const warm = await measureCase(loggingCase(MiB, log, false), withRounds, undefined, undefined, () => {});
      assert.deepEqual(warm.peers.map((p) => [p.kind, p.samples]), [['tirl', 3], ['typescript', 3], ['copy', 3]]);
    } finally {
      await sweeper.close();
    }
  });

  it('times a case at or below the threshold warm, several calls a sample, with no sweep', async () => {
    const log: string[] = [];
    const sweeper = new LoggingSweeper(log, MiB, 1);
    try {
      const result = await measureCase(loggingCase(2 * MiB, log, true), { ...options, cache: { coldAboveBytes: 2 * MiB, sweeper } }, undefined, undefined, () => {});
      assert.equal(result.cache, 'warm');
      assert.equal(result.sweepMs, undefined);
      assert.ok(!log.includes('evict') && !log.includes('torch-evict'), 'no sweep for a warm case');
      assert.ok(result.peers[0].inner > 1, `inner ${result.peers[0].inner}`);
      const noPlan = await measureCase(loggingCase(8 * MiB, log, false), options, undefined, undefined, () => {});
      assert.equal(noPlan.cache, 'warm', 'without a sweeper every case is warm');
    } finally {
      await sweeper.close();
    }
  });

  it('has the PyTorch co-process sweep its own buffer before a cold sample', { skip: !existsSync('/usr/bin/python3') && 'no /usr/bin/python3' }, async (t) => {
    const benchCase = dpoCase(64);
    const start = await startTorch([benchCase], 1, { bytes: MiB, threads: 1 });
    if (!start.runner) {
      t.skip(`PyTorch not available: ${start.reason}`);
      return;
    }
    try {
      assert.equal(await start.runner.setup(benchCase), undefined);
      // The co-process reports what its sweep read: the whole buffer asked for (1 MiB) each
      // cold sample, nothing for a warm one.
      for (const evict of [false, true, true, false]) {
        const sample = await start.runner.sample(benchCase.id, 1, evict);
        assert.ok(sample.wall > 0 && Number.isFinite(sample.cpu), JSON.stringify(sample));
        assert.equal(sample.sweptBytes, evict ? MiB : 0, JSON.stringify(sample));
      }
    } finally {
      start.runner.close();
    }
  });

  it('splits each size\'s "threads vs 1" rounds among passes over every size, each pass setting the case up again', async () => {
    const log: string[] = [];
    const fakeCase = (id: string): BenchCase => ({
      op: 'fake',
      id,
      title: id,
      sizes: ['full'],
      bytes: 1,
      setup() {
        log.push(`setup ${id}`);
        const peer: Peer = {
          name: id,
          kind: 'tirl',
          sample: () => {
            log.push(`${id} ${currentThreads()}`);
            return { wall: 1e-3, cpu: 1e-3 };
          },
        };
        return { peers: [peer], check: () => '' };
      },
    }) as BenchCase;
    const rows = await measureScaling(
      { threads: 2, rounds: 7, minSampleSeconds: 0, progress: () => {} },
      [{ size: 'small', benchCase: fakeCase('a') }, { size: 'large', benchCase: fakeCase('b') }],
    );
    assert.equal(SCALING_PASSES, 3);
    assert.deepEqual(log.filter((l) => l.startsWith('setup')), ['setup a', 'setup b', 'setup a', 'setup b', 'setup a', 'setup b']);
    // Each pass: 3 warm-up rounds of both sides, then its rounds (3, 2, 2: 7 in all), each
    // a one-thread and a two-thread sample.
    for (const id of ['a', 'b']) {
      assert.equal(log.filter((l) => l === `${id} 1`).length, 3 * 3 + 7, `${id}: one-thread samples`);
      assert.equal(log.filter((l) => l === `${id} 2`).length, 3 * 3 + 7, `${id}: two-thread samples`);
    }
    assert.deepEqual(rows.map((r) => [r.id, r.size, r.rounds, r.pairedRatio]), [['a', 'small', 7, 1], ['b', 'large', 7, 1]]);
  });
});
