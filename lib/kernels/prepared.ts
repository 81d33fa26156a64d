/**
 * A call of an op whose options were read and checked once, by its `prepare…` function
 * (e.g. {@link preparePpoLoss}): it takes only the arrays, so a trainer calling the same
 * op with the same options on every micro-batch pays for its options once. Results are
 * bitwise those of the plain call with the same options and arrays; bad arrays are the same
 * TypeError/RangeError, and an option among the arrays is a TypeError naming it. Value
 * ranges are checked by the C call itself, on every call, as for the plain call.
 */
export interface PreparedCall<Arrays, Result> {
  (arrays: Arrays): Result;
  /**
   * The same call off the event loop, as the op's `…Async` form (arrays on ordinary
   * ArrayBuffers are copied when it is made; see "Async calls" in the README). Bad arrays
   * are a rejected Promise, never a throw.
   */
  async(arrays: Arrays): Promise<Result>;
}
