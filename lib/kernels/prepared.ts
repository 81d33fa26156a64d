/**
 * A call of an op whose options were read and checked once, by its `prepare…` function
 * (e.g. {@link preparePpoLoss}): it takes only the arrays, so a trainer calling the same
 * op with the same options on every micro-batch pays for its options once. Results are
 * bitwise those of the plain call with the same options and arrays; bad arrays are the same
 * TypeError/RangeError, and an option among the arrays is a TypeError naming it. Value
 * ranges are checked by the C call itself, on every call, as for the plain call.
 */
export interface PreparedCall<Arrays, Result, Positional extends unknown[] = never> {
  (arrays: Arrays): Result;
  /**
   * The same call with the arrays as arguments, in a fixed order (the op's `prepare…`
   * function lists it), instead of an object of them: nothing is left to read but the
   * arrays themselves, so it is the cheapest call of the op (for a 1,024-token `ppoLoss`,
   * about 10k x86 instructions less than the object form by the README's callgrind counts,
   * about a microsecond of CPU time less by its benchmarks/binding_ab.ts times).
   * Results are bitwise those of the object form. Pass `undefined` for an optional array
   * left out before one that is given. A wrong or detached array is the same
   * TypeError/RangeError, naming the array, as for the object form; more arguments than
   * the op has arrays is a TypeError. Sync only: an async call's cost is its copies and,
   * above 64 KiB of arrays, its round trip through the thread pool, which this would not
   * change.
   */
  positional(...arrays: Positional): Result;
  /**
   * The same call off the event loop, as the op's `…Async` form (arrays on ordinary
   * ArrayBuffers are copied when it is made; see "Async calls" in the README). Bad arrays
   * are a rejected Promise, never a throw.
   */
  async(arrays: Arrays): Promise<Result>;
}
