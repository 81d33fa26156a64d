/**
 * The trainers' JSONL logs: one JSON value a line, appended as a run goes and rewritten
 * when a run resumes from a checkpoint.
 * @internal
 */
import { appendFile, mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';

/** Appends `lines` (each already one line of JSON and its newline) to `file`, creating its folder. */
export async function appendLines(file: string, lines: readonly string[]): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  await appendFile(file, lines.join(''));
}

/** Appends `value` to `file` as one line of JSON. */
export function appendJsonLine(file: string, value: unknown): Promise<void> {
  return appendLines(file, [JSON.stringify(value) + '\n']);
}

/** Replaces `file` with one line of JSON per value. */
export async function writeJsonLines(file: string, values: readonly unknown[]): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, values.map((value) => JSON.stringify(value) + '\n').join(''));
}
