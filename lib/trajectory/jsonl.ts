/**
 * Streaming JSONL of trajectories: one JSON object per line, read and written one episode
 * at a time so a file of a million episodes never needs a million in memory.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { once } from 'node:events';
import { finished } from 'node:stream/promises';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { parseTrajectory, type Trajectory } from './model.js';
import { typeError } from '../check.js';

/** A line that could not be read as a trajectory. */
export interface InvalidLine {
  /** 1-based line number in the input. */
  lineNumber: number;
  error: Error;
}

/** Options for `readTrajectories`. */
export interface ReadTrajectoriesOptions {
  /**
   * What to do with a line that is not valid JSON or not a valid trajectory: 'throw' (default)
   * rejects with the line number; 'skip' passes it to `onInvalidLine` and goes on.
   */
  invalidLines?: 'throw' | 'skip';
  /** Called for each skipped line when `invalidLines` is 'skip'. */
  onInvalidLine?: (invalid: InvalidLine) => void;
}

/**
 * Reads trajectories from a JSONL file path or a readable stream, one at a time. Blank lines
 * are ignored. Bytes that are not valid UTF-8 decode to U+FFFD rather than failing.
 */
export async function* readTrajectories(
  source: string | Readable,
  options: ReadTrajectoriesOptions = {},
): AsyncGenerator<Trajectory> {
  if (typeof source !== 'string' && (source === null || typeof source !== 'object' || typeof (source as Readable).pipe !== 'function')) {
    throw typeError('source', 'a file path or a readable stream', source);
  }
  const invalidLines = options.invalidLines ?? 'throw';
  if (invalidLines !== 'throw' && invalidLines !== 'skip') {
    throw typeError('options.invalidLines', "'throw' or 'skip'", invalidLines);
  }
  const input = typeof source === 'string' ? createReadStream(source, { encoding: 'utf8' }) : source;
  if (typeof source !== 'string') source.setEncoding('utf8');
  const lines = createInterface({ input, crlfDelay: Infinity });
  let lineNumber = 0;
  try {
    for await (const line of lines) {
      lineNumber++;
      if (line.trim() === '') continue;
      let trajectory: Trajectory;
      try {
        trajectory = parseTrajectory(JSON.parse(line), `line ${lineNumber}`);
      } catch (cause) {
        const error = cause instanceof Error ? cause : new Error(String(cause));
        if (invalidLines === 'throw') throw new SyntaxError(`Invalid trajectory on line ${lineNumber}: ${error.message}`, { cause: error });
        options.onInvalidLine?.({ lineNumber, error });
        continue;
      }
      yield trajectory;
    }
  } finally {
    lines.close();
    if (typeof source === 'string') input.destroy();
  }
}

/**
 * Writes trajectories as JSONL to a file path (created or truncated) or a writable stream,
 * honouring back-pressure. A stream passed in is left open; a file is closed at the end.
 * @returns the number of trajectories written.
 */
export async function writeTrajectories(
  destination: string | Writable,
  trajectories: Iterable<Trajectory> | AsyncIterable<Trajectory>,
): Promise<number> {
  if (typeof destination !== 'string' && (destination === null || typeof destination !== 'object' || typeof (destination as Writable).write !== 'function')) {
    throw typeError('destination', 'a file path or a writable stream', destination);
  }
  const output = typeof destination === 'string' ? createWriteStream(destination, { encoding: 'utf8' }) : destination;
  let count = 0;
  try {
    for await (const trajectory of trajectories) {
      if (!output.write(JSON.stringify(trajectory) + '\n')) await once(output, 'drain');
      count++;
    }
  } finally {
    if (typeof destination === 'string') {
      output.end();
      await finished(output);
    }
  }
  return count;
}
