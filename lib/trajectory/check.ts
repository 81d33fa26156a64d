/**
 * Argument checks of the SDK modules, on the shared message shape of `lib/tools/check.ts`:
 * "Expected <what> for <name> but received <value> of type <type>".
 * @internal
 */
import { expectedMessage } from '../tools/check.js';

/** A TypeError in the shared message shape. */
export function typeError(name: string, expected: string, value: unknown): TypeError {
  return new TypeError(expectedMessage(expected, name, value));
}

/** A RangeError in the shared message shape. */
export function rangeError(name: string, expected: string, value: unknown): RangeError {
  return new RangeError(expectedMessage(expected, name, value));
}

/** Returns `value` if it is a string, else throws a TypeError naming `name`. */
export function checkString(name: string, value: unknown): string {
  if (typeof value !== 'string') throw typeError(name, 'a string', value);
  return value;
}

/** Returns `value` if it is a finite number, else throws a TypeError naming `name`. */
export function checkFiniteNumber(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw typeError(name, 'a finite number', value);
  return value;
}

/** Returns `value` if it is an integer >= 0; TypeError for a non-integer, RangeError for a negative one. */
export function checkNonNegativeInteger(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw typeError(name, 'an integer', value);
  if (value < 0) throw rangeError(name, 'a non-negative integer', value);
  return value;
}

/** Returns `value` if it is an integer >= 1; TypeError for a non-integer, RangeError below 1. */
export function checkPositiveInteger(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw typeError(name, 'an integer', value);
  if (value < 1) throw rangeError(name, 'a positive integer', value);
  return value;
}

/** Returns `value` if it is a non-null, non-array object, else throws a TypeError naming `name`. */
export function checkObject(name: string, value: unknown): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw typeError(name, 'an object', value);
  return value as Record<string, unknown>;
}

/** Returns `value` if it is an array, else throws a TypeError naming `name`. */
export function checkArray(name: string, value: unknown): unknown[] {
  if (!Array.isArray(value)) throw typeError(name, 'an array', value);
  return value;
}
