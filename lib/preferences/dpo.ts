/**
 * Preference pairs to `dpoLoss` inputs: pairs are packed as 2P sequences (chosen, rejected,
 * chosen, …) whose completions are action tokens; `sequenceLogprobs` sums their log-probs.
 */
import { feedbackMask, Role, sequenceLogprobs, sequenceLogprobsBackward } from '../kernels/index.js';
import { packTrajectories, type PackOptions, type TokenBatch } from '../trajectory/batch.js';
import type { Action, Trajectory } from '../trajectory/model.js';
import type { PreferencePair } from './pairs.js';
import { checkArray, checkObject, typeError } from '../check.js';

/**
 * Packs pairs into a batch of 2P sequences: sequence 2k is pair k's prompt and chosen
 * completion, 2k+1 its prompt and rejected completion; the completion is the action.
 * A pair with a `context` (the real conversation the solver saw, see `buildPreferencePairs`)
 * is packed as that conversation followed by the chosen or the rejected action as generated:
 * its token record (prompt, earlier turns, feedback, the completion's token ids) is used
 * verbatim, so the DPO loss scores exactly the tokens the engine sampled in that context; only
 * spans without a record are rendered by the template. Earlier turns of the context are
 * feedback-like context, never trained on: only the completion is an action.
 * Trajectory ids are `<questionId>/<kind>[/<step>]/<k>/chosen|rejected`.
 */
export function packPreferencePairs(pairs: readonly PreferencePair[], options: PackOptions): TokenBatch {
  checkArray('pairs', pairs);
  const trajectories: Trajectory[] = [];
  pairs.forEach((pair, k) => {
    checkObject(`pairs[${k}]`, pair);
    const base = `${pair.questionId}/${pair.kind}${pair.step === undefined ? '' : `/${pair.step}`}/${k}`;
    if (pair.context === undefined) {
      trajectories.push(
        { id: `${base}/chosen`, prompt: pair.prompt, turns: [{ action: { text: pair.chosen } }], reward: pair.chosenScore, groupId: base },
        { id: `${base}/rejected`, prompt: pair.prompt, turns: [{ action: { text: pair.rejected } }], reward: pair.rejectedScore, groupId: base },
      );
      return;
    }
    checkObject(`pairs[${k}].context`, pair.context);
    const context = pair.context;
    checkObject(`pairs[${k}].chosenAction`, pair.chosenAction);
    checkObject(`pairs[${k}].rejectedAction`, pair.rejectedAction);
    const completion = (action: Action, which: 'chosen' | 'rejected', reward: number): Trajectory => ({
      ...structuredClone(context), id: `${base}/${which}`, turns: [...structuredClone(context.turns), { action: structuredClone(action) }], reward, groupId: base,
    });
    trajectories.push(completion(pair.chosenAction!, 'chosen', pair.chosenScore), completion(pair.rejectedAction!, 'rejected', pair.rejectedScore));
  });
  const batch = packTrajectories(trajectories, options);
  // Only the completion (each sequence's last turn) is trained on: earlier actions of a
  // context become prompt.
  for (let i = 0; i < batch.size; i++) {
    const first = batch.turnOffsets[i]!;
    const last = batch.turnOffsets[i + 1]! - 1;
    for (let turn = first; turn < last; turn++) {
      for (let t = batch.turnStarts[turn]!; t < batch.turnActionEnds[turn]!; t++) {
        if (batch.roles[t] !== Role.action) continue;
        batch.roles[t] = Role.prompt;
        batch.behaviourLogprobs[t] = 0;
        batch.actionTokenCounts[i]!--;
      }
    }
  }
  return batch;
}

/** The four `dpoLoss` inputs, Float32Array[P] each. */
export interface DpoInputs {
  policyChosen: Float32Array;
  policyRejected: Float32Array;
  refChosen: Float32Array;
  refRejected: Float32Array;
}

function deinterleave(values: Float32Array): [Float32Array, Float32Array] {
  const pairs = values.length / 2;
  const even = new Float32Array(pairs);
  const odd = new Float32Array(pairs);
  for (let k = 0; k < pairs; k++) {
    even[k] = values[2 * k]!;
    odd[k] = values[2 * k + 1]!;
  }
  return [even, odd];
}

/**
 * `dpoLoss` inputs from token log-probs of a batch made by `packPreferencePairs`: completion
 * log-probs summed per sequence by `sequenceLogprobs` (mask from `feedbackMask`).
 * @param policyLogp Float32Array[N]: log-probs of `batch.tokens` under the policy.
 * @param refLogp Float32Array[N]: the same under the reference policy.
 * @param average per-token mean instead of sum (IPO). Default false.
 */
export function dpoInputs(batch: TokenBatch, policyLogp: Float32Array, refLogp: Float32Array, average = false): DpoInputs {
  if (batch === null || typeof batch !== 'object' || batch.size % 2 !== 0) throw typeError('batch', 'a batch from packPreferencePairs (an even number of sequences)', batch);
  const { mask } = feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets });
  const [policyChosen, policyRejected] = deinterleave(sequenceLogprobs({ logp: policyLogp, mask, seqOffsets: batch.seqOffsets, average }));
  const [refChosen, refRejected] = deinterleave(sequenceLogprobs({ logp: refLogp, mask, seqOffsets: batch.seqOffsets, average }));
  return { policyChosen, policyRejected, refChosen, refRejected };
}

/**
 * Gradient of the DPO loss with respect to the policy's token log-probs (Float32Array[N]),
 * from `dpoLoss`'s per-pair `gradChosen` and `gradRejected`, through `sequenceLogprobsBackward`.
 * `average` must match the one given to `dpoInputs`.
 */
export function dpoTokenGradient(batch: TokenBatch, gradChosen: Float32Array, gradRejected: Float32Array, average = false): Float32Array {
  const pairs = batch.size / 2;
  if (!(gradChosen instanceof Float32Array) || gradChosen.length !== pairs) throw typeError('gradChosen', `a Float32Array of length ${pairs}`, gradChosen);
  if (!(gradRejected instanceof Float32Array) || gradRejected.length !== pairs) throw typeError('gradRejected', `a Float32Array of length ${pairs}`, gradRejected);
  const gradSeq = new Float32Array(batch.size);
  for (let k = 0; k < pairs; k++) {
    gradSeq[2 * k] = gradChosen[k]!;
    gradSeq[2 * k + 1] = gradRejected[k]!;
  }
  const { mask } = feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets });
  return sequenceLogprobsBackward({ gradSeq, mask, seqOffsets: batch.seqOffsets, average });
}
