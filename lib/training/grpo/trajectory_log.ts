/**
 * The trajectory log of a GRPO run (`trajectoryLogFile`): every episode of every step as
 * the SDK's `Trajectory`, marked with its step and the filter that removed it, and cut
 * back to the restored steps when a run resumes.
 */
import { readFile, writeFile } from 'node:fs/promises';

import { annotateFiltered, type FilterReport } from '../../filters/index.js';
import type { TokenBatch } from '../../trajectory/index.js';
import { appendLines } from '../jsonl_log.js';

/** Appends the step's episodes to the trajectory log, each marked with its step and filter. */
export async function appendTrajectoryLog(file: string, step: number, batch: TokenBatch, report: FilterReport): Promise<void> {
  const lines = annotateFiltered(batch, report).map((t) => JSON.stringify({ ...t, metadata: { ...t.metadata, step } }) + '\n');
  await appendLines(file, lines);
}

/** Drops the trajectory log's lines of steps after `step` (those of a step lost in flight). */
export async function truncateTrajectoryLog(file: string, step: number): Promise<void> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  const kept = text.split('\n').filter((line) => {
    if (!line.endsWith('}')) return false;
    const lineStep = (JSON.parse(line) as { metadata?: { step?: number } }).metadata?.step;
    return lineStep !== undefined && lineStep <= step;
  });
  await writeFile(file, kept.map((line) => line + '\n').join(''));
}
