/**
 * The served-model harness of the end-to-end agent tests: one trained demo policy per test
 * process, served over HTTP by the project's own server (`tirl serve`'s, vLLM and SGLang
 * formats) on a free localhost port. Tests that train it call `resetServedModel()` first,
 * so each starts from the trained checkpoint whatever ran before.
 */
import * as tf from '@tensorflow/tfjs';

import { startTrainedServer, type TrainedServer } from '../app/serve/trained_server.js';

let served: Promise<TrainedServer> | undefined;

/** The process's served model, trained and started on first use (about 5-20 s). */
export function servedModel(): Promise<TrainedServer> {
  served ??= startTrainedServer({ seed: 1 });
  return served;
}

/** Restores the served policy's weights and optimizer state to the trained checkpoint. */
export async function resetServedModel(): Promise<TrainedServer> {
  const server = await servedModel();
  await server.policy.loadState(server.checkpoint);
  return server;
}

/** Stops the server and removes its checkpoint. */
export async function closeServedModel(): Promise<void> {
  if (served === undefined) return;
  const server = await served;
  served = undefined;
  await server.close();
}

/** The served policy's parameters, copied (to compare before and after a training step). */
export function servedWeights(server: TrainedServer): Float32Array[] {
  return server.policy.network.variables.map((v) => (v as tf.Variable).dataSync().slice() as Float32Array);
}

/** Largest absolute difference between two weight snapshots. */
export function weightChange(before: readonly Float32Array[], after: readonly Float32Array[]): number {
  let change = 0;
  before.forEach((values, i) => values.forEach((v, j) => (change = Math.max(change, Math.abs(v - after[i]![j]!)))));
  return change;
}
