import { native, type NativeInfo } from './native.js';

/** Library information: version, threads, SIMD path and build flags. */
export type TirlInfo = NativeInfo;

/**
 * Reports the version, the number of threads the CPU kernels use, the SIMD code path
 * chosen for this CPU and how the native library was built.
 */
export function info(): TirlInfo {
  return native.info();
}

/**
 * Sets the number of threads the CPU kernels use (an integer in [1, 1024]). The default
 * is the `TIRL_NUM_THREADS` environment variable when set, else the CPUs this process
 * may run on. Results do not depend on it: kernels are bitwise deterministic for any
 * thread count. It applies to the whole process, worker threads included.
 */
export function setThreads(threads: number): void {
  native.setThreads(threads);
}
