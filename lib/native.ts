/**
 * Loads the native addon (a prebuild from `prebuilds/`, or `build/Release` in a checkout;
 * the environment variable `TIRL_NATIVE_DIR` names another folder holding `tirl.node`,
 * such as the sanitizer build of `scripts/test-sanitize.sh`) and declares its shape. Each
 * op's file in `kernels/` adds its own functions to {@link NativeAddon} next to its
 * wrapper, so an op's types live in one place.
 */
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** What the native library reports about itself. */
export interface NativeInfo {
  /** Version of the native library (equals the package version). */
  version: string;
  /** Threads the CPU kernels use (see {@link NativeAddon.setThreads}). */
  threads: number;
  /**
   * SIMD code path the CPU kernels run: `"avx512"`, `"avx2"` (with FMA) or the baseline
   * (`"sse2"` on x86-64), chosen at load from the CPU; `TIRL_SIMD=baseline|avx2|avx512`
   * asks for a narrower one.
   */
  simd: string;
  /** Compiler, build type and architecture of the native build. */
  build: string;
  /** N-API version the addon targets. */
  napiVersion: number;
  /** Whether the CUDA kernels can run here, and why not when they cannot. */
  cuda: CudaStatus;
}

/** Whether the CUDA kernels can run in this process. */
export interface CudaStatus {
  /** True when libtirl_cuda loaded, the NVIDIA driver is present and reports a device. */
  available: boolean;
  /**
   * Why CUDA is unavailable (absent when it is available): the CUDA library was not built
   * or not found, no NVIDIA driver, a CUDA error, or no device.
   */
  reason?: string;
}

/** The addon's functions. Ops extend this interface from their own files. */
export interface NativeAddon {
  info(): NativeInfo;
  setThreads(threads: number): void;
  /**
   * The floor of every `…Async` op, for the bench (not part of the SDK): a Promise resolved
   * with undefined once an empty work item has run on libuv's thread pool, queued and
   * settled through Node-API exactly as an op's kernel is, with no arguments, copies or
   * kernel. An op's async call costs this, its sync call's work, and its copies.
   */
  poolRoundTrip(): Promise<void>;
  /**
   * For the bench, not the SDK: every op's `<op>CCalls(options, calls, times?)` reads
   * `options` as the op's sync form does, then makes the op's C call `calls` times (an
   * integer in [1, 2^31 - 1]) on those arrays and options with no JavaScript between them.
   * With `times`, a Float64Array of at least 2 entries, it writes there the wall-clock and
   * the process CPU seconds a C call took, timed natively around the C calls alone.
   */
  [cCalls: `${string}CCalls`]: (options: object, calls: number, times?: Float64Array) => void;
}

const require = createRequire(import.meta.url);
const packageRoot = fileURLToPath(new URL('../..', import.meta.url));

function loadAddon(): NativeAddon {
  const nativeDir = process.env.TIRL_NATIVE_DIR;
  if (nativeDir) {
    const path = join(resolve(nativeDir), 'tirl.node');
    try {
      return require(path) as NativeAddon;
    } catch (cause) {
      throw new Error(`tirl: could not load the native addon ${path} named by TIRL_NATIVE_DIR`, { cause });
    }
  }
  const nodeGypBuild = require('node-gyp-build') as (dir: string) => unknown;
  try {
    return nodeGypBuild(packageRoot) as NativeAddon;
  } catch (cause) {
    throw new Error(
      `tirl: could not load the native addon for ${process.platform}-${process.arch} ` +
        `(Node ${process.versions.node}, N-API ${process.versions.napi}). ` +
        'No prebuild matches this platform and no build/Release exists: in a checkout run ' +
        "'npm run build'; in an installed package reinstall with a C++17 compiler and cmake " +
        'available so that it builds from source.',
      { cause },
    );
  }
}

/** The loaded addon. */
export const native: NativeAddon = loadAddon();
