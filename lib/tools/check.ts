/**
 * Argument checks for the tools and policies modules. Every message has one shape:
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

/** Builds the common error message. */
export function expectedMessage(what: string, name: string, value: unknown): string {
  return `Expected ${what} for ${name} but received ${describe(value)}`;
}

/** Throws a TypeError unless `value` is a string. */
export function checkString(value: unknown, name: string): string {
  if (typeof value !== 'string') throw new TypeError(expectedMessage('a string', name, value));
  return value;
}

/** Throws a TypeError unless `value` is a non-empty string. */
export function checkNonEmptyString(value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(expectedMessage('a non-empty string', name, value));
  }
  return value;
}

/**
 * Returns `value`, or `fallback` when `value` is undefined; throws a TypeError for a
 * non-number and a RangeError for a number that is not an integer in [min, max].
 */
export function checkInteger(value: unknown, name: string, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw new TypeError(expectedMessage(`an integer in [${min}, ${max}]`, name, value));
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(expectedMessage(`an integer in [${min}, ${max}]`, name, value));
  }
  return value;
}

/**
 * Returns `value`, or `fallback` when undefined; a TypeError for a non-number, a
 * RangeError for a non-finite number or one outside [min, max].
 */
export function checkNumber(value: unknown, name: string, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw new TypeError(expectedMessage(`a number in [${min}, ${max}]`, name, value));
  if (!Number.isFinite(value) || value < min || value > max) {
    throw new RangeError(expectedMessage(`a number in [${min}, ${max}]`, name, value));
  }
  return value;
}

/** Throws a TypeError unless `value` is a plain object (not null, not an array). */
export function checkObject(value: unknown, name: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(expectedMessage('an object', name, value));
  }
  return value as Record<string, unknown>;
}

/** Returns `value`, or `{}` when undefined; otherwise as {@link checkObject}. */
export function checkOptions(value: unknown, name: string): Record<string, unknown> {
  return value === undefined ? {} : checkObject(value, name);
}

/** Throws a TypeError unless `value` is an array of strings; undefined gives `fallback`. */
export function checkStringArray(value: unknown, name: string, fallback: readonly string[]): string[] {
  if (value === undefined) return [...fallback];
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'string')) {
    throw new TypeError(expectedMessage('an array of strings', name, value));
  }
  return [...value];
}
