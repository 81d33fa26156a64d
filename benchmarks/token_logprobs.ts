/**
 * tokenLogprobs cases: log-probabilities of the labels from 4096×32,000 and 1024×151,936
 * logits (Llama-2 and Qwen vocabularies), f32 and bf16; the forward alone (computing old
 * or reference log-probs) and forward + backward (the training step).
 */
import { tokenLogprobs, tokenLogprobsBackward } from '../lib/index.js';
import { labelsFor, logitsLike, Rng, toBf16 } from './data.js';
import { cCallPeer, compareArrays, sliceUnits, syncPeer, type BenchCase, type Peer, type SizeName } from './harness.js';
import { native } from '../lib/native.js';
import {
  tokenLogprobsBackwardBf16Ts,
  tokenLogprobsBackwardTs,
  tokenLogprobsBf16Ts,
  tokenLogprobsTs,
} from '../test/reference/token_logprobs.js';

type Dtype = 'f32' | 'bf16';

/** The logits of the last shape used: the f32 and bf16 cases of one shape share them. */
let cachedLogits: { key: string; f32: Float32Array; bf16?: Uint16Array } | undefined;

function logitsFor(numTokens: number, vocabSize: number, dtype: Dtype): Float32Array | Uint16Array {
  const key = `${numTokens}x${vocabSize}`;
  if (cachedLogits?.key !== key) {
    cachedLogits = undefined; // let the previous shape's arrays go before allocating
    cachedLogits = { key, f32: logitsLike(numTokens, vocabSize) };
  }
  if (dtype === 'f32') return cachedLogits.f32;
  cachedLogits.bf16 ??= toBf16(cachedLogits.f32);
  return cachedLogits.bf16;
}

export function tokenLogprobsCase(numTokens: number, vocabSize: number, dtype: Dtype, backward: boolean, sizes: SizeName[]): BenchCase {
  const elements = numTokens * vocabSize;
  const width = dtype === 'f32' ? 4 : 2;
  const what = backward ? 'forward+backward' : 'forward';
  const bytes = backward ? elements * (2 * width + 4) + 16 * numTokens : elements * width + 8 * numTokens;
  return {
    op: 'tokenLogprobs',
    id: `tokenLogprobs/${numTokens}x${vocabSize}/${dtype}${backward ? '/fwd+bwd' : '/fwd'}`,
    title: `tokenLogprobs ${what}, ${numTokens}×${vocabSize.toLocaleString('en-US')} ${dtype} logits`,
    sizes,
    bytes,
    byteModel: backward
      ? `logits read twice (${width} B each: forward, then backward) and the f32 gradient written (4 B) per logit, + labels, logp and gradLogp`
      : `logits read once (${width} B per logit), + labels read and logp written (8 B/token)`,
    bandwidthTarget: 0.6,
    torch: { op: 'tokenLogprobs', params: { numTokens, vocabSize, dtype, backward } },
    setup() {
      const logits = logitsFor(numTokens, vocabSize, dtype);
      const labels = labelsFor(numTokens, vocabSize);
      const gradLogp = new Rng(13).bell(numTokens, 0, 1);
      const logp = new Float32Array(numTokens);
      const tsLogp = new Float32Array(numTokens);
      // Written completely by each peer in turn: one gradient buffer serves all of them.
      const grad = backward ? new Float32Array(elements) : new Float32Array(0);
      const base = { logits, vocabSize, labels, dtype } as const;
      const forwardTs =
        dtype === 'f32'
          ? () => tokenLogprobsTs(logits as Float32Array, vocabSize, labels, tsLogp)
          : () => tokenLogprobsBf16Ts(logits as Uint16Array, vocabSize, labels, tsLogp);
      const backwardTs =
        dtype === 'f32'
          ? () => tokenLogprobsBackwardTs(logits as Float32Array, vocabSize, labels, gradLogp, grad)
          : () => tokenLogprobsBackwardBf16Ts(logits as Uint16Array, vocabSize, labels, gradLogp, grad);
      const peers: Peer[] = backward
        ? [
            syncPeer('tirl, out reused', 'tirl', () => {
              tokenLogprobs({ ...base, out: { logp } });
              tokenLogprobsBackward({ ...base, gradLogp, out: grad });
            }),
            syncPeer('tirl, allocating', 'tirl-alloc', () => {
              tokenLogprobs(base);
              tokenLogprobsBackward({ ...base, gradLogp });
            }),
            cCallPeer([
              [native.tokenLogprobsCCalls, { ...base, out: { logp } }],
              [native.tokenLogprobsBackwardCCalls, { ...base, gradLogp, out: grad }],
            ]),
            syncPeer('TypeScript, 1 thread', 'typescript', () => {
              forwardTs();
              backwardTs();
            }),
          ]
        : [
            syncPeer('tirl, out reused', 'tirl', () => tokenLogprobs({ ...base, out: { logp } })),
            syncPeer('tirl, allocating', 'tirl-alloc', () => tokenLogprobs(base)),
            cCallPeer([[native.tokenLogprobsCCalls, { ...base, out: { logp } }]]),
            syncPeer('TypeScript, 1 thread', 'typescript', forwardTs),
          ];
      const slice = (rows: number) => {
        const head = { ...base, logits: logits.subarray(0, rows * vocabSize), labels: labels.subarray(0, rows) };
        const forward = { ...head, out: { logp: logp.subarray(0, rows) } };
        const backwardHead = { ...head, gradLogp: gradLogp.subarray(0, rows), out: grad.subarray(0, rows * vocabSize) };
        return backward
          ? () => {
              tokenLogprobs(forward);
              tokenLogprobsBackward(backwardHead);
            }
          : () => tokenLogprobs(forward);
      };
      return {
        peers,
        arithmetic: { slice, units: sliceUnits(bytes, numTokens), total: numTokens },
        check() {
          // The first rows only: the TypeScript peer takes seconds on the whole batch.
          const rows = Math.min(numTokens, 16);
          const head = {
            ...base,
            logits: logits.subarray(0, rows * vocabSize),
            labels: labels.subarray(0, rows),
            gradLogp: gradLogp.subarray(0, rows),
          };
          const theirLogp = new Float32Array(rows);
          const theirGrad = new Float32Array(rows * vocabSize);
          if (head.logits instanceof Float32Array) {
            tokenLogprobsTs(head.logits, vocabSize, head.labels, theirLogp);
            tokenLogprobsBackwardTs(head.logits, vocabSize, head.labels, head.gradLogp, theirGrad);
          } else {
            tokenLogprobsBf16Ts(head.logits, vocabSize, head.labels, theirLogp);
            tokenLogprobsBackwardBf16Ts(head.logits, vocabSize, head.labels, head.gradLogp, theirGrad);
          }
          // tokenLogprobs refuses the backward's gradLogp as an unknown option.
          const { gradLogp: _unused, ...forwardHead } = head;
          return (
            compareArrays('logp', tokenLogprobs(forwardHead).logp, theirLogp, 1e-4) ??
            (backward ? compareArrays('grad', tokenLogprobsBackward(head), theirGrad, 1e-4) : undefined)
          );
        },
      };
    },
  };
}

const SHAPES: [number, number, SizeName][] = [
  [4096, 32_000, 'full'],
  [1024, 151_936, 'full'],
  [64, 32_000, 'quick'],
  [16, 151_936, 'quick'],
];

export const cases: BenchCase[] = SHAPES.flatMap(([numTokens, vocabSize, size]) =>
  (['f32', 'bf16'] as const).flatMap((dtype) =>
    [false, true].map((backward) => tokenLogprobsCase(numTokens, vocabSize, dtype, backward, [size])),
  ),
);
