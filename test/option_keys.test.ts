/**
 * The bindings' translation layer, for every op: an option key no one reads is refused by
 * name, a value passes through to the core, whose one message (naming the C argument) comes
 * out with the JavaScript name, the same from the sync and the async form.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as tirl from '../lib/index.js';

const f32 = (...values: number[]) => Float32Array.from(values);
const u8 = (...values: number[]) => Uint8Array.from(values);
const i32 = (...values: number[]) => Int32Array.from(values);

/** A valid call of every op. */
const CALLS: Record<string, Record<string, unknown>> = {
  ppoLoss: { logp: f32(-1, -2), oldLogp: f32(-1, -2), advantages: f32(1, -1), mask: u8(1, 1) },
  groupAdvantages: { rewards: f32(1, 2, 3, 4), groupSize: 2 },
  dpoLoss: { policyChosen: f32(-1), policyRejected: f32(-2), refChosen: f32(-1), refRejected: f32(-2) },
  feedbackMask: { roles: u8(0, 1, 2), seqOffsets: i32(0, 3) },
  sequenceLogprobs: { logp: f32(-1, -2), mask: u8(1, 1), seqOffsets: i32(0, 2) },
  sequenceLogprobsBackward: { gradSeq: f32(1), mask: u8(1, 1), seqOffsets: i32(0, 2) },
  tokenLogprobs: { logits: f32(1, 2, 3, 4), vocabSize: 2, labels: i32(0, 1) },
  tokenLogprobsBackward: { logits: f32(1, 2, 3, 4), vocabSize: 2, labels: i32(0, 1), gradLogp: f32(1, 1) },
  rolloutCorrection: { logp: f32(-1, -2), rolloutLogp: f32(-1.1, -2), mask: u8(1, 1), seqOffsets: i32(0, 2) },
  advantages: { rewards: f32(1, 0), mask: u8(1, 1), seqOffsets: i32(0, 1, 2), groupSize: 2 },
};

type Op = (options: unknown) => unknown;
const op = (name: string) => (tirl as unknown as Record<string, Op>)[name];

async function throwsBoth(name: string, options: unknown, error: typeof TypeError, message: RegExp) {
  assert.throws(() => op(name)(options), (e: Error) => e instanceof error && message.test(e.message), `${name} sync`);
  await assert.rejects(Promise.resolve().then(() => op(name + 'Async')(options)), (e: Error) => e instanceof error && message.test(e.message), `${name} async`);
}

describe('option keys', () => {
  for (const [name, call] of Object.entries(CALLS)) {
    it(`${name}: a misspelt key is a TypeError naming it and the op; an undefined one is as good as absent`, async () => {
      op(name)(call);
      await throwsBoth(name, { ...call, tempreature: 0.5 }, TypeError, new RegExp(`^${name}: Expected no option named 'tempreature' \\(${name} reads [^)]+\\) but received the number 0.5$`));
      op(name)({ ...call, tempreature: undefined });
    });
  }

  it('reads the own keys of any plain options object: long, many, non-enumerable, null-prototype, holding a NUL, not ASCII', async () => {
    // The binding copies an object's own keys into a buffer of 2,048 bytes (NUL after each)
    // and reads the options by them; its copy past 256 bytes, keys past the buffer, a key
    // holding a NUL or not ASCII (then read key by key), and keys that are not enumerable.
    const ppo = CALLS.ppoLoss;
    const expected = op('ppoLoss')(ppo);
    const misspelt = (key: string) => new RegExp(`^ppoLoss: Expected no option named '${key.replace('\0', '\\0')}' \\(ppoLoss reads `);
    const many: Record<string, unknown> = { ...ppo };
    for (let i = 0; i < 40; ++i) many[`an_unused_key_of_some_length_${i}`] = undefined;
    assert.deepEqual(op('ppoLoss')({ ...many, clipLow: 0.2 }), expected);
    await throwsBoth('ppoLoss', { ...many, ['x'.repeat(300)]: 1 }, TypeError, misspelt('x'.repeat(300)));
    await throwsBoth('ppoLoss', { ...ppo, 'clip\0Low': 0.3 }, TypeError, /Expected no option named 'clip/);
    assert.deepEqual(op('ppoLoss')({ ...ppo, 'clip\0Low': undefined }), expected);
    const hidden = Object.defineProperty({ ...ppo }, 'clipLow', { value: 0.5, enumerable: false });
    assert.deepEqual(op('ppoLoss')(hidden), op('ppoLoss')({ ...ppo, clipLow: 0.5 }));
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, ppo, { kLcoef: 1 });
    await throwsBoth('ppoLoss', bare, TypeError, misspelt('kLcoef'));
    const past: Record<string, unknown> = { ...ppo };
    for (let i = 0; i < 40; ++i) past[`${'a_key_long_enough_to_fill_the_buffer_'.repeat(2)}${i}`] = undefined;
    assert.deepEqual(op('ppoLoss')({ ...past, clipLow: 0.5 }), op('ppoLoss')({ ...ppo, clipLow: 0.5 }));
    await throwsBoth('ppoLoss', { ...past, kLcoef: 1 }, TypeError, misspelt('kLcoef'));
    await throwsBoth('ppoLoss', { ...ppo, clipLöw: 0.3 }, TypeError, misspelt('clipLöw'));
    assert.deepEqual(op('ppoLoss')({ ...ppo, clipLöw: undefined, clipLow: 0.5 }), op('ppoLoss')({ ...ppo, clipLow: 0.5 }));
  });

  it('reads the options of a call that a Proxy trap makes while another call lists its keys', () => {
    // The binding lists a call's keys into one buffer per environment; a call made from an
    // ownKeys trap while the buffer is being written reads its own options key by key.
    const ppo = CALLS.ppoLoss;
    const dpo = CALLS.dpoLoss;
    let inner: unknown;
    const outer = new Proxy({ ...ppo, clipLow: 0.5 }, {
      ownKeys(target) {
        inner = op('dpoLoss')({ ...dpo, beta: 0.5 });
        return Reflect.ownKeys(target);
      },
    });
    assert.deepEqual(op('ppoLoss')(outer), op('ppoLoss')({ ...ppo, clipLow: 0.5 }));
    assert.deepEqual(inner, op('dpoLoss')({ ...dpo, beta: 0.5 }));
    assert.throws(() => op('ppoLoss')(new Proxy({ ...ppo }, {
      ownKeys() {
        op('dpoLoss')({ ...dpo, betta: 1 });
        return [];
      },
    })), /^TypeError: dpoLoss: Expected no option named 'betta'/);
    // The same while the keys' bytes are written (user code run by a patched builtin).
    const charCodeAt = String.prototype.charCodeAt;
    let patched: unknown;
    String.prototype.charCodeAt = function (this: string, index: number) {
      String.prototype.charCodeAt = charCodeAt;
      patched = op('dpoLoss')({ ...dpo, beta: 0.5 });
      return charCodeAt.call(this, index);
    };
    try {
      assert.deepEqual(op('ppoLoss')({ ...ppo, clipLow: 0.5 }), op('ppoLoss')({ ...ppo, clipLow: 0.5 }));
    } finally {
      String.prototype.charCodeAt = charCodeAt;
    }
    assert.deepEqual(patched, inner);
  });

  it('tokenLogprobsBackward refuses the forward-only withEntropy', async () => {
    await throwsBoth('tokenLogprobsBackward', { ...CALLS.tokenLogprobsBackward, withEntropy: true }, TypeError, /'withEntropy'/);
  });
});

describe('one validation layer: the core decides ranges, the binding names the JavaScript option', () => {
  const ppo = CALLS.ppoLoss;
  const cases: [string, string, Record<string, unknown>, typeof TypeError, RegExp][] = [
    ['ppoLoss', 'clipHigh', { ...ppo, clipHigh: -1 }, RangeError, /^ppoLoss: Expected a finite number >= 0 for clipHigh but received -1$/],
    ['ppoLoss', 'clipLow', { ...ppo, clipLow: NaN }, RangeError, /^ppoLoss: Expected a number in \[0, 1\) for clipLow but received NaN$/],
    ['ppoLoss', 'dualClip', { ...ppo, dualClip: 0.5 }, RangeError, /^ppoLoss: Expected a finite number > 1 \(or 0 for off\) for dualClip but received 0.5$/],
    ['ppoLoss', 'dualClip 0', { ...ppo, dualClip: 0 }, RangeError, /^ppoLoss: Expected a number other than 0 for dualClip/],
    ['ppoLoss', 'dpSize', { ...ppo, dpSize: Infinity }, RangeError, /for dpSize but received Infinity$/],
    ['ppoLoss', 'refLogp', { ...ppo, klCoef: 0.1 }, TypeError, /^ppoLoss: Expected refLogp with klCoef > 0 but received undefined$/],
    ['ppoLoss', 'seqOffsets', { ...ppo, aggregation: 'seq-mean-token-sum' }, TypeError, /^ppoLoss: Expected seqOffsets with a seq-mean-\* aggregation but received undefined$/],
    ['ppoLoss', 'seqOffsets[1]', { ...ppo, seqOffsets: i32(0, 3, 2) }, RangeError, /^ppoLoss: Expected non-decreasing seqOffsets but received seqOffsets\[2\] = 2 < seqOffsets\[1\] = 3$/],
    ['groupAdvantages', 'groupSize', { rewards: f32(1, 2, 3), groupSize: 2 }, RangeError, /^groupAdvantages: Expected a groupSize >= 1 that divides rewards\.length \(3\) for groupSize but received 2$/],
    ['rolloutCorrection', 'rolloutRsThreshold', { ...CALLS.rolloutCorrection, rolloutRs: 'token_k2,seq_sum_k3', rolloutRsThreshold: [1, -1] }, RangeError, /^rolloutCorrection: Expected a finite number > 0 for rolloutRsThreshold\['seq_sum_k3'\] but received -1$/],
    ['rolloutCorrection', 'rolloutIsThresholdLower', { ...CALLS.rolloutCorrection, rolloutIsThresholdLower: 3 }, RangeError, /^rolloutCorrection: Expected a number in \(0, rolloutIsThreshold\] \(or 0 for TIS\) for rolloutIsThresholdLower but received 3$/],
    ['groupAdvantages', 'epsilon', { ...CALLS.groupAdvantages, epsilon: -1 }, RangeError, /for epsilon but received -1$/],
    ['dpoLoss', 'labelSmoothing', { ...CALLS.dpoLoss, labelSmoothing: 0.5 }, RangeError, /^dpoLoss: Expected a number in \[0, 0\.5\) for labelSmoothing but received 0.5$/],
    ['tokenLogprobs', 'temperature', { ...CALLS.tokenLogprobs, temperature: 0 }, RangeError, /^tokenLogprobs: Expected a number in \[1e-37, 1e\+37\] for temperature but received 0$/],
    ['tokenLogprobs', 'labels', { ...CALLS.tokenLogprobs, labels: i32(0, 2) }, RangeError, /^tokenLogprobs: Expected labels in \[0, vocabSize = 2\) but received labels\[1\] = 2$/],
    ['advantages', 'fNorm', { ...CALLS.advantages, estimator: 'gpg', fNorm: -1 }, RangeError, /^advantages: Expected a finite number > 0 for fNorm but received -1$/],
    ['advantages', 'gamma', { ...CALLS.advantages, gamma: 0.5 }, TypeError, /^advantages: Expected no gamma \(not read by estimator 'grpo'\) but received the number 0.5$/],
    ['advantages', 'values', { rewards: f32(1, 0), mask: u8(1, 1), seqOffsets: i32(0, 1, 2), estimator: 'gae' }, TypeError, /^advantages: Expected values with estimator 'gae' but received undefined$/],
  ];
  for (const [name, label, options, error, message] of cases) {
    it(`${name} ${label}`, async () => throwsBoth(name, options, error, message));
  }
});
