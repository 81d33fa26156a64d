/**
 * CUDA: the unavailable path is tested on every machine; the GPU tests run where
 * `cuda.available()` says a GPU is usable and are skipped, with the reason, elsewhere.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  ADVANTAGE_ESTIMATORS,
  advantages,
  cuda,
  dpoLoss,
  feedbackMask,
  feedbackMaskAsync,
  groupAdvantages,
  info,
  ppoLoss,
  rolloutCorrection,
  sequenceLogprobs,
  sequenceLogprobsBackward,
  tokenLogprobs,
  tokenLogprobsBackward,
} from '../lib/index.js';
import { assertClose, checkBadInputs, Random } from './support.js';

const status = cuda.available();
const gpu = status.available ? false : `no usable GPU: ${status.reason}`;
const noGpu = status.available ? 'a GPU is available here' : false;

function randomRoles(rng: Random, b: number, maxLen: number) {
  const seqOffsets = rng.seqOffsets(b, 0, maxLen);
  const roles = new Uint8Array(seqOffsets[b]);
  for (let i = 0; i < roles.length; i++) roles[i] = rng.int(0, 4);
  return { roles, seqOffsets, keep: rng.mask(b, 0.7) };
}

describe('cuda availability', () => {
  it('reports the same status through cuda.available() and info().cuda', () => {
    assert.equal(typeof status.available, 'boolean');
    assert.deepEqual(info().cuda, status);
    if (!status.available) {
      assert.equal(typeof status.reason, 'string');
      assert.ok(status.reason!.length > 10, `reason too short: ${status.reason}`);
    } else {
      assert.equal(status.reason, undefined);
    }
  });
});

describe('cuda unavailable', { skip: noGpu }, () => {
  it('refuses to create device arrays with a clear Error giving the reason', () => {
    for (const make of [() => new cuda.DeviceArray('f32', 4), () => cuda.DeviceArray.from(new Uint8Array(3))]) {
      assert.throws(make, (error: Error) => {
        assert.equal(error.constructor, Error);
        assert.match(error.message, /CUDA is unavailable/);
        assert.ok(error.message.includes(status.reason!), error.message);
        return true;
      });
    }
  });

  it('still checks DeviceArray arguments before looking for CUDA', () => {
    checkBadInputs([
      { name: 'unknown dtype', call: () => new cuda.DeviceArray('f64' as never, 1), error: TypeError, message: 'for dtype' },
      { name: 'length not a number', call: () => new cuda.DeviceArray('f32', '4' as never), error: TypeError, message: 'for length' },
      { name: 'negative length', call: () => new cuda.DeviceArray('f32', -1), error: RangeError, message: 'for length' },
      { name: 'fractional length', call: () => new cuda.DeviceArray('u8', 1.5), error: RangeError, message: 'for length' },
      { name: 'bad device', call: () => new cuda.DeviceArray('u8', 1, { device: -1 }), error: RangeError, message: 'for device' },
      { name: 'from an Array', call: () => cuda.DeviceArray.from([1, 2] as never), error: TypeError, message: 'for source' },
    ]);
  });

  it('keeps running ops on the CPU', () => {
    const r = feedbackMask({ roles: Uint8Array.from([0, 1, 2, 1]), seqOffsets: Int32Array.from([0, 4]) });
    assert.deepEqual([...r.mask], [0, 1, 0, 1]);
  });
});

describe('cuda device arrays', { skip: gpu }, () => {
  it('round-trips every dtype, zero-initialised', () => {
    const sources = {
      f32: Float32Array.from([1.5, -2, Number.NaN, Infinity]),
      u8: Uint8Array.from([0, 255, 7]),
      i32: Int32Array.from([-5, 2147483647]),
      u16: Uint16Array.from([1, 65535]),
      bf16: Uint16Array.from([0x3f80, 0xc000]),
    } as const;
    for (const [dtype, source] of Object.entries(sources)) {
      const empty = new cuda.DeviceArray(dtype as cuda.DeviceDtype, source.length);
      assert.ok(empty.download().every((x: number) => x === 0), `${dtype} not zeroed`);
      empty.free();
      const array = cuda.DeviceArray.from(source as Uint16Array, dtype as 'bf16');
      assert.equal(array.dtype, dtype);
      assert.equal(array.length, source.length);
      assert.equal(array.byteLength, source.byteLength);
      assert.deepEqual(array.download(), source);
      array.free();
      assert.equal(array.freed, true);
      array.free();
    }
  });

  it('refuses wrong hosts arrays and freed arrays', () => {
    const array = new cuda.DeviceArray('f32', 3);
    checkBadInputs([
      { name: 'upload wrong type', call: () => array.upload(new Int32Array(3) as never), error: TypeError, message: 'for source' },
      { name: 'upload wrong length', call: () => array.upload(new Float32Array(2)), error: RangeError, message: 'length 3' },
      { name: 'download wrong type', call: () => array.download(new Uint8Array(3) as never), error: TypeError, message: 'for out' },
    ]);
    array.free();
    assert.throws(() => array.download(), /freed/);
  });

  it('runs feedbackMask on the GPU with the CPU result, sync and async', async () => {
    const rng = new Random(5);
    for (const [b, maxLen] of [[1, 1], [3, 40], [200, 3000], [5000, 20]]) {
      const { roles, seqOffsets, keep } = randomRoles(rng, b, maxLen);
      const cpu = feedbackMask({ roles, seqOffsets, keep });
      const device = {
        roles: cuda.DeviceArray.from(roles),
        seqOffsets: cuda.DeviceArray.from(seqOffsets),
        keep: cuda.DeviceArray.from(keep),
      };
      const onGpu = feedbackMask(device);
      assert.deepEqual(onGpu.mask.download(), cpu.mask);
      assert.deepEqual(onGpu.actionTokens.download(), cpu.actionTokens);
      const asyncResult = await feedbackMaskAsync(device);
      assert.deepEqual(asyncResult.mask.download(), cpu.mask);
      const noKeep = feedbackMask({ roles: device.roles, seqOffsets: device.seqOffsets });
      assert.deepEqual(noKeep.mask.download(), feedbackMask({ roles, seqOffsets }).mask);
    }
  });

  it('reports bad device data with the CPU messages, and mixed devices as TypeErrors', () => {
    const from = cuda.DeviceArray.from;
    const roles = from(Uint8Array.from([0, 1, 2]));
    checkBadInputs([
      { name: 'role out of range', call: () => feedbackMask({ roles: from(Uint8Array.from([0, 9, 1])), seqOffsets: from(Int32Array.from([0, 3])) }), error: RangeError, message: 'roles[1] = 9' },
      { name: 'offsets short', call: () => feedbackMask({ roles, seqOffsets: from(Int32Array.from([0, 2])) }), error: RangeError, message: 'end at the token count 3' },
      { name: 'offsets decreasing', call: () => feedbackMask({ roles, seqOffsets: from(Int32Array.from([0, 2, 1, 3])) }), error: RangeError, message: 'non-decreasing' },
      { name: 'offsets not from 0', call: () => feedbackMask({ roles, seqOffsets: from(Int32Array.from([1, 3])) }), error: RangeError, message: 'seqOffsets[0]' },
      { name: 'host offsets', call: () => feedbackMask({ roles, seqOffsets: Int32Array.from([0, 3]) } as never), error: TypeError, message: 'like roles' },
      { name: 'wrong dtype', call: () => feedbackMask({ roles: from(Float32Array.from([0])), seqOffsets: from(Int32Array.from([0, 1])) } as never), error: TypeError, message: 'DeviceArray of f32' },
      { name: 'host out', call: () => feedbackMask({ roles, seqOffsets: from(Int32Array.from([0, 3])), out: { mask: new Uint8Array(3) } } as never), error: TypeError, message: 'out.mask' },
    ]);
    const freed = from(Uint8Array.from([1]));
    freed.free();
    assert.throws(() => feedbackMask({ roles: freed, seqOffsets: from(Int32Array.from([0, 1])) }), /freed DeviceArray/);
  });

  it('will not free an array a pending async op uses', async () => {
    const roles = cuda.DeviceArray.from(new Uint8Array(1 << 20).fill(1));
    const seqOffsets = cuda.DeviceArray.from(Int32Array.from([0, 1 << 20]));
    const pending = feedbackMaskAsync({ roles, seqOffsets });
    assert.throws(() => roles.free(), /pending async op/);
    const r = await pending;
    assert.deepEqual(r.actionTokens.download(), Int32Array.from([1 << 20]));
    roles.free();
  });
});

/** Uploads every typed array of `options` (nested `out` too) to the GPU. */
function toDevice<T extends object>(options: T): cuda.OnDevice<T> {
  const convert = (value: unknown): unknown => {
    if (value instanceof Uint16Array) return cuda.DeviceArray.from(value, 'bf16');
    if (ArrayBuffer.isView(value)) return cuda.DeviceArray.from(value as Float32Array);
    if (Array.isArray(value)) return value.map(convert);
    if (value !== null && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, convert(v)]));
    }
    return value;
  };
  return convert(options) as cuda.OnDevice<T>;
}

/** Downloads every DeviceArray of a result (numbers stay). */
function toHost(result: unknown): unknown {
  if (result instanceof cuda.DeviceArray) return result.download();
  if (result !== null && typeof result === 'object' && !ArrayBuffer.isView(result)) {
    return Object.fromEntries(Object.entries(result).map(([k, v]) => [k, toHost(v)]));
  }
  return result;
}

/** GPU and CPU results agree within the CPU tests' tolerance (numbers and arrays). */
function assertSameResult(gpu: unknown, cpu: unknown, rtol: number, label: string): void {
  if (typeof cpu === 'number') {
    assertClose(gpu as number, cpu, { rtol, label });
  } else if (ArrayBuffer.isView(cpu)) {
    assertClose(gpu as Float32Array, cpu as Float32Array, { rtol, label });
  } else if (cpu !== null && typeof cpu === 'object') {
    for (const [key, value] of Object.entries(cpu)) assertSameResult((gpu as Record<string, unknown>)[key], value, rtol, `${label}.${key}`);
  }
}

describe('ops on the GPU agree with the CPU', { skip: gpu }, () => {
  const rng = new Random(17);
  const seqOffsets = rng.seqOffsets(40, 0, 300);
  const n = seqOffsets[seqOffsets.length - 1];
  const logp = rng.normals(n, 0.7);
  for (let i = 0; i < n; i++) logp[i] -= 1.5;
  const mask = rng.mask(n, 0.8);
  const oldLogp = logp.map((x) => x + 0.3 * rng.normal());
  const ppoInputs = { logp, oldLogp, advantages: rng.normals(n), mask, seqOffsets };

  const cases: Array<[string, () => unknown, () => unknown, number]> = [];
  for (const aggregation of ['token-mean', 'token-sum', 'seq-mean-token-sum', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'] as const) {
    const options = { ...ppoInputs, aggregation, refLogp: logp.map((x) => x + 0.1), klCoef: 0.05, dualClip: 3 };
    cases.push([`ppoLoss ${aggregation}`, () => ppoLoss(options), () => ppoLoss(toDevice(options)), 1e-5]);
  }
  const weighted = { ...ppoInputs, weights: rng.normals(n, 0.1).map((x) => x + 1), klCoef: 0.1, refLogp: logp, klEstimator: 'k2' as const };
  cases.push(['ppoLoss weights k2', () => ppoLoss(weighted), () => ppoLoss(toDevice(weighted)), 1e-5]);
  const gspo = { ...ppoInputs, ratioLevel: 'sequence' as const, aggregation: 'seq-mean-token-mean' as const };
  cases.push(['ppoLoss gspo', () => ppoLoss(gspo), () => ppoLoss(toDevice(gspo)), 1e-5]);
  for (const average of [false, true]) {
    const options = { logp, mask, seqOffsets, average };
    cases.push([`sequenceLogprobs average=${average}`, () => sequenceLogprobs(options), () => sequenceLogprobs(toDevice(options)), 1e-5]);
    const backward = { gradSeq: rng.normals(40), mask, seqOffsets, average };
    cases.push([`sequenceLogprobsBackward average=${average}`, () => sequenceLogprobsBackward(backward), () => sequenceLogprobsBackward(toDevice(backward)), 1e-5]);
  }
  const rewards = rng.normals(96);
  const groupIds = Int32Array.from({ length: 96 }, () => rng.int(0, 20));
  cases.push(['groupAdvantages groupIds', () => groupAdvantages({ rewards, groupIds }), () => groupAdvantages(toDevice({ rewards, groupIds })), 1e-5]);
  cases.push(['groupAdvantages groupSize', () => groupAdvantages({ rewards, groupSize: 8 }), () => groupAdvantages(toDevice({ rewards, groupSize: 8 })), 1e-5]);
  // advantages: every estimator, ids in any order with groups of one, token rewards, fully masked sequences.
  const advantageIds = Int32Array.from({ length: 40 }, () => rng.int(-5, 15));
  for (const estimator of ADVANTAGE_ESTIMATORS) {
    const grouped = !['reinforce_plus_plus', 'remax', 'gae'].includes(estimator);
    const tokenBaseline = estimator.endsWith('optimal_token_baseline');
    const options = {
      estimator, mask, seqOffsets, withReturns: true,
      ...(estimator === 'gdpo' ? { rewards: rng.normals(80), rewardWeights: Float32Array.of(1, 0.5) } : { tokenRewards: rng.normals(n).map((x) => (x > 1 ? x : 0)) }),
      ...(grouped ? { groupIds: advantageIds } : {}),
      ...(estimator === 'gae' ? { values: rng.normals(n), gamma: 0.9, lam: 0.95 } : {}),
      ...(estimator === 'reinforce_plus_plus' ? { gamma: 0.9 } : {}),
      ...(estimator === 'remax' ? { rewardBaselines: rng.normals(40) } : {}),
      ...(tokenBaseline ? { oldLogp: logp, sumPiSquared: logp.map((x) => Math.exp(2 * x)), rolloutIsWeights: rng.floats(n, 0.5, 1.5) } : {}),
    };
    cases.push([`advantages ${estimator}`, () => advantages(options), () => advantages(toDevice(options)), 1e-5]);
  }
  for (const variant of ['sigmoid', 'hinge', 'ipo', 'robust'] as const) {
    const pairs = { policyChosen: rng.normals(50, 10), policyRejected: rng.normals(50, 10), refChosen: rng.normals(50, 10), refRejected: rng.normals(50, 10), variant };
    cases.push([`dpoLoss ${variant}`, () => dpoLoss(pairs), () => dpoLoss(toDevice(pairs)), 1e-5]);
  }
  const rolloutInputs = { logp, rolloutLogp: oldLogp, mask, seqOffsets };
  const chain = { rolloutRs: ['token_k1', 'seq_sum_k2', 'seq_mean_k3', 'seq_max_k3'] as const, rolloutRsThreshold: [1.5, 2, 0.05, 0.3] };
  for (const rolloutIs of ['none', 'token', 'sequence'] as const) {
    const bands = rolloutIs === 'none' ? [{}] : [{ rolloutIsBatchNormalize: true }, { rolloutIsThresholdLower: 0.5, rolloutIsThreshold: 3 }];
    for (const band of bands) {
      const options = { ...rolloutInputs, rolloutIs, ...band, ...chain };
      cases.push([`rolloutCorrection ${rolloutIs} ${JSON.stringify(band)}`, () => rolloutCorrection(options), () => rolloutCorrection(toDevice(options)), 1e-5]);
    }
  }
  const vocabSize = 1000;
  const logits = rng.normals(30 * vocabSize, 3);
  const labels = Int32Array.from({ length: 30 }, () => rng.int(0, vocabSize));
  const bf16 = new Uint16Array(logits.buffer.slice(0)).filter((_, i) => i % 2 === 1);
  for (const [dtype, data, rtol] of [['f32', logits, 1e-5], ['bf16', bf16, 2e-2]] as const) {
    const forward = { logits: data, vocabSize, labels, temperature: 0.7, withEntropy: true, dtype };
    cases.push([`tokenLogprobs ${dtype}`, () => tokenLogprobs(forward as never), () => tokenLogprobs(toDevice(forward) as never), rtol]);
    // The backward reads no withEntropy (an unread option is refused).
    const { withEntropy: _, ...inputs } = forward;
    const backward = { ...inputs, gradLogp: rng.normals(30), gradEntropy: rng.normals(30, 0.1) };
    cases.push([`tokenLogprobsBackward ${dtype}`, () => tokenLogprobsBackward(backward as never), () => tokenLogprobsBackward(toDevice(backward) as never), rtol]);
  }

  for (const [name, onCpu, onGpu, rtol] of cases) {
    it(name, () => {
      const cpu = onCpu();
      const first = toHost(onGpu());
      assertSameResult(first, cpu, rtol, name);
      assert.deepEqual(toHost(onGpu()), first, `${name}: two GPU runs differ`);
    });
  }

  it('tokenLogprobsBackward in place over f32 device logits', () => {
    const options = { logits, vocabSize, labels, gradLogp: rng.normals(30) };
    const cpu = tokenLogprobsBackward(options);
    const device = toDevice(options);
    const out = tokenLogprobsBackward({ ...device, out: device.logits });
    assert.equal(out, device.logits);
    assertClose(out.download(), cpu, { rtol: 1e-5 });
  });
});
