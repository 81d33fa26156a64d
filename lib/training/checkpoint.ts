/**
 * Crash-safe checkpoint directories. Each checkpoint is written into a `.partial`
 * directory, renamed into place when complete, and only then named in the `latest` file
 * (itself replaced by a rename). A process killed at any moment leaves the previous
 * checkpoint intact and `latest` pointing at a complete one.
 */
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

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

async function prune(root: string, latest: string): Promise<void> {
  const entries = (await readdir(root)).filter((e) => e.startsWith(PREFIX)).sort();
  const complete = entries.filter((e) => !e.endsWith('.partial') && e <= latest);
  const keep = new Set(complete.slice(-(KEEP_OLDER + 1)));
  for (const entry of entries) {
    if (!keep.has(entry)) await rm(join(root, entry), { recursive: true, force: true });
  }
}
