/**
 * Argument checks shared by the SDK: one message shape,
 * "Expected <what> for <name> but received <value> of type <type>".
 */

/** Describes a value briefly (bounded length) for an error message. */
export function describeValue(value: unknown): string {
  let text: string;
  if (typeof value === 'string') text = JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value);
  else if (Array.isArray(value)) text = `array of length ${value.length}`;
  else if (ArrayBuffer.isView(value)) text = `${value.constructor.name} of length ${(value as unknown as ArrayLike<unknown>).length}`;
  else if (value !== null && typeof value === 'object') text = 'object';
  else text = String(value);
  const type = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value;
  return `${text} of type ${type}`;
}

/** A TypeError in the shared message shape. */
export function typeError(name: string, expected: string, value: unknown): TypeError {
  return new TypeError(`Expected ${expected} for ${name} but received ${describeValue(value)}`);
}

/** A RangeError in the shared message shape. */
export function rangeError(name: string, expected: string, value: unknown): RangeError {
  return new RangeError(`Expected ${expected} for ${name} but received ${describeValue(value)}`);
}

export function checkString(name: string, value: unknown): string {
  if (typeof value !== 'string') throw typeError(name, 'a string', value);
  return value;
}

export function checkFiniteNumber(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw typeError(name, 'a finite number', value);
  return value;
}

export function checkNonNegativeInteger(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw typeError(name, 'an integer', value);
  if (value < 0) throw rangeError(name, 'a non-negative integer', value);
  return value;
}

export function checkPositiveInteger(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw typeError(name, 'an integer', value);
  if (value < 1) throw rangeError(name, 'a positive integer', value);
  return value;
}

export function checkObject(name: string, value: unknown): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw typeError(name, 'an object', value);
  return value as Record<string, unknown>;
}

export function checkArray(name: string, value: unknown): unknown[] {
  if (!Array.isArray(value)) throw typeError(name, 'an array', value);
  return value;
}
