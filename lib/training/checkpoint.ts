/**
 * Crash-safe checkpoint directories. Each checkpoint is written into a `.partial`
 * directory, renamed into place when complete, and only then named in the `latest` file
 * (itself replaced by a rename). A process killed at any moment leaves the previous
 * checkpoint intact and `latest` pointing at a complete one.
 */
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

import type { Policy } from './trainable_policy.js';

const LATEST = 'latest';
const PREFIX = 'step-';
/** Checkpoints kept besides the latest: one older, in case the latest is damaged by hand. */
const KEEP_OLDER = 1;

/** Writes the checkpoint of `step` under `root` through `write(dir)`; returns its directory. */
export async function writeCheckpoint(root: string, step: number, write: (dir: string) => Promise<void>): Promise<string> {
  const name = `${PREFIX}${String(step).padStart(8, '0')}`;
  const final = join(root, name);
  const partial = `${final}.partial`;
  await rm(partial, { recursive: true, force: true });
  await mkdir(partial, { recursive: true });
  await write(partial);
  await rm(final, { recursive: true, force: true });
  await rename(partial, final);
  await writeFile(join(root, `${LATEST}.partial`), name);
  await rename(join(root, `${LATEST}.partial`), join(root, LATEST));
  await prune(root, name);
  return final;
}

/** Directory of the latest complete checkpoint under `root`, or undefined when there is none. */
export async function latestCheckpoint(root: string): Promise<string | undefined> {
  let name: string;
  try {
    name = (await readFile(join(root, LATEST), 'utf8')).trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  return join(root, name);
}

/** Saves `policy`'s state into the folder `name` of the checkpoint `dir`. */
export async function savePolicy(dir: string, name: 'policy' | 'reference', policy: Policy): Promise<void> {
  await mkdir(join(dir, name), { recursive: true });
  await policy.saveState(join(dir, name));
}

/** Restores `policy`'s state from the folder `name` of the checkpoint `dir`. */
export function loadPolicy(dir: string, name: 'policy' | 'reference', policy: Policy): Promise<void> {
  return policy.loadState(join(dir, name));
}

/** Writes a trainer's own state (step, generator, metrics, …) as the checkpoint's `trainer.json`. */
export async function writeTrainerState(dir: string, state: { format: string }): Promise<void> {
  await writeFile(join(dir, 'trainer.json'), JSON.stringify(state));
}

/**
 * Reads the checkpoint's `trainer.json`; throws "<trainer>: <dir> is not a <kind> checkpoint"
 * unless its format is `format`.
 */
export async function readTrainerState<State>(dir: string, format: string, trainer: string, kind: string): Promise<State> {
  const state = JSON.parse(await readFile(join(dir, 'trainer.json'), 'utf8')) as { format?: unknown };
  if (state.format !== format) throw new Error(`${trainer}: ${dir} is not a ${kind} checkpoint`);
  return state as State;
}

async function prune(root: string, latest: string): Promise<void> {
  const entries = (await readdir(root)).filter((e) => e.startsWith(PREFIX)).sort();
  const complete = entries.filter((e) => !e.endsWith('.partial') && e <= latest);
  const keep = new Set(complete.slice(-(KEEP_OLDER + 1)));
  for (const entry of entries) {
    if (!keep.has(entry)) await rm(join(root, entry), { recursive: true, force: true });
  }
}
