/** The reference of `advantages` lives beside the benchmark, which ships; tests use the same. */
export * from '../../benchmarks/peers/advantages.js';
