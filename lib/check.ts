/**
 * The SDK's one validation layer. Every check takes the argument's name first, then its
 * value, then what the check needs (a fallback, a range), and every message has one shape:
 * "Expected <what> for <name> but received <value> of type <type>".
 * @internal
 */

function describe(value: unknown): string {
  let shown: string;
  if (typeof value === 'string') shown = JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  else if (typeof value === 'function') shown = '[function]';
  else if (Array.isArray(value)) shown = `[array of length ${value.length}]`;
  else if (typeof value === 'object' && value !== null) shown = '[object]';
  else shown = String(value);
  const type = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
  return `${shown} of type ${type}`;
}

/** The one message shape: "Expected <expected> for <name> but received <value> of type <type>". */
export function expectedMessage(name: string, expected: string, value: unknown): string {
  return `Expected ${expected} for ${name} but received ${describe(value)}`;
}

/** A TypeError in the one message shape. */
export function typeError(name: string, expected: string, value: unknown): TypeError {
  return new TypeError(expectedMessage(name, expected, value));
}

/** A RangeError in the one message shape. */
export function rangeError(name: string, expected: string, value: unknown): RangeError {
  return new RangeError(expectedMessage(name, expected, value));
}

/** Returns `value` if it is a string, else throws a TypeError naming `name`. */
export function checkString(name: string, value: unknown): string {
  if (typeof value !== 'string') throw typeError(name, 'a string', value);
  return value;
}

/** Returns `value` if it is a non-empty string, else throws a TypeError naming `name`. */
export function checkNonEmptyString(name: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw typeError(name, 'a non-empty string', value);
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

/**
 * Returns `value`, or `fallback` when `value` is undefined; throws a TypeError for a
 * non-number and a RangeError for a number that is not an integer in [min, max].
 */
export function checkInteger(name: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw typeError(name, `an integer in [${min}, ${max}]`, value);
  if (!Number.isInteger(value) || value < min || value > max) throw rangeError(name, `an integer in [${min}, ${max}]`, value);
  return value;
}

/**
 * Returns `value`, or `fallback` when undefined; a TypeError for a non-number, a
 * RangeError for a non-finite number or one outside [min, max].
 */
export function checkNumber(name: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw typeError(name, `a number in [${min}, ${max}]`, value);
  if (!Number.isFinite(value) || value < min || value > max) throw rangeError(name, `a number in [${min}, ${max}]`, value);
  return value;
}

/** Returns `value` if it is a plain object (not null, not an array), else throws a TypeError naming `name`. */
export function checkObject(name: string, value: unknown): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw typeError(name, 'an object', value);
  return value as Record<string, unknown>;
}

/** Returns `value`, or `{}` when undefined; otherwise as {@link checkObject}. */
export function checkOptions(name: string, value: unknown): Record<string, unknown> {
  return value === undefined ? {} : checkObject(name, value);
}

/** Returns `value` if it is an array, else throws a TypeError naming `name`. */
export function checkArray(name: string, value: unknown): unknown[] {
  if (!Array.isArray(value)) throw typeError(name, 'an array', value);
  return value;
}

/** A copy of `value` if it is an array of strings, of `fallback` when undefined; else a TypeError. */
export function checkStringArray(name: string, value: unknown, fallback: readonly string[]): string[] {
  if (value === undefined) return [...fallback];
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'string')) throw typeError(name, 'an array of strings', value);
  return [...value];
}

/** Reads an optional positive-integer option, with its default. */
export function positiveOption(name: string, value: unknown, fallback: number): number {
  return value === undefined ? fallback : checkPositiveInteger(name, value);
}

/** Reads an optional non-negative-integer option, with its default. */
export function nonNegativeOption(name: string, value: unknown, fallback: number): number {
  return value === undefined ? fallback : checkNonNegativeInteger(name, value);
}

/** Reads an optional string option. */
export function stringOption(name: string, value: unknown): string | undefined {
  return value === undefined ? undefined : checkString(name, value);
}

/** Reads an optional function option. */
export function functionOption<F>(name: string, value: unknown): F | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') throw typeError(name, 'a function', value);
  return value as F;
}
