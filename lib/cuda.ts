/**
 * CUDA from JavaScript: whether the GPU kernels can run here, and device arrays, blocks of
 * GPU memory that every op with a CUDA kernel accepts in place of typed arrays. An op
 * given device arrays runs on that GPU and returns device arrays (scalars as numbers);
 * all arrays of one call must be on the same device.
 *
 * The CUDA kernels live in a separate library loaded on first use, so everything else in
 * tirl works on machines without a GPU, driver or CUDA toolkit.
 */
import { native, type CudaStatus } from './native.js';

export type { CudaStatus } from './native.js';

/** Element types of device arrays. `bf16` holds raw bfloat16 bits, read and written as `Uint16Array`. */
export type DeviceDtype = 'f32' | 'u8' | 'i32' | 'u16' | 'bf16';

/** The typed array that holds a dtype's elements in host memory. */
export interface HostArrayOf {
  f32: Float32Array;
  u8: Uint8Array;
  i32: Int32Array;
  u16: Uint16Array;
  bf16: Uint16Array;
}

/**
 * The GPU form of an op's options or result: every typed array becomes a
 * {@link DeviceArray} of the matching dtype (`Uint16Array` bf16 bits: `'bf16'` or `'u16'`),
 * in nested objects (`out`) too; numbers, strings and booleans stay as they are.
 */
export type OnDevice<T> = T extends Float32Array
  ? DeviceArray<'f32'>
  : T extends Uint8Array
    ? DeviceArray<'u8'>
    : T extends Int32Array
      ? DeviceArray<'i32'>
      : T extends Uint16Array
        ? DeviceArray<'bf16' | 'u16'>
        : T extends object
          ? { [K in keyof T]: OnDevice<T[K]> }
          : T;

/** Options of the {@link DeviceArray} constructor and {@link DeviceArrayConstructor.from}. */
export interface DeviceArrayOptions {
  /** CUDA device ordinal to allocate on. Default 0. */
  device?: number;
}

/**
 * A zero-initialised array of `length` elements of one dtype in GPU memory. The memory is
 * released by {@link DeviceArray.free}, or when the object is garbage-collected; since the
 * garbage collector does not see GPU memory, free large arrays explicitly.
 */
export interface DeviceArray<D extends DeviceDtype = DeviceDtype> {
  /** Element type. */
  readonly dtype: D;
  /** Number of elements. */
  readonly length: number;
  /** Size in bytes. */
  readonly byteLength: number;
  /** CUDA device ordinal the memory is on. */
  readonly device: number;
  /** True once {@link DeviceArray.free} has run; a freed array can no longer be used. */
  readonly freed: boolean;
  /**
   * Copies `source` (the dtype's typed array, of exactly `length` elements) to the device.
   * Returns once the copy is complete.
   */
  upload(source: HostArrayOf[D]): this;
  /** Copies the device memory into `out`, or a new typed array, and returns it. */
  download(out?: HostArrayOf[D]): HostArrayOf[D];
  /**
   * Releases the GPU memory now. Throws while an async op using the array is pending.
   * Freeing twice is harmless.
   */
  free(): void;
}

/** The {@link DeviceArray} class. */
export interface DeviceArrayConstructor {
  /**
   * Allocates `length` zeroed elements of `dtype` on the GPU.
   *
   * @throws Error when CUDA is unavailable (the message gives the reason) or the CUDA
   *   runtime fails (the message gives CUDA's error); TypeError/RangeError for bad arguments.
   */
  new <D extends DeviceDtype>(dtype: D, length: number, options?: DeviceArrayOptions): DeviceArray<D>;
  /**
   * A new device array holding a copy of `source`. The dtype defaults to the typed array's
   * (`Uint16Array` gives `u16`: pass `'bf16'` for bfloat16 bits).
   */
  from(source: Float32Array, dtype?: 'f32', options?: DeviceArrayOptions): DeviceArray<'f32'>;
  from(source: Uint8Array, dtype?: 'u8', options?: DeviceArrayOptions): DeviceArray<'u8'>;
  from(source: Int32Array, dtype?: 'i32', options?: DeviceArrayOptions): DeviceArray<'i32'>;
  from(source: Uint16Array, dtype?: 'u16', options?: DeviceArrayOptions): DeviceArray<'u16'>;
  from(source: Uint16Array, dtype: 'bf16', options?: DeviceArrayOptions): DeviceArray<'bf16'>;
  prototype: DeviceArray;
}

declare module './native.js' {
  interface NativeAddon {
    DeviceArray: DeviceArrayConstructor;
    cudaStatus(): CudaStatus;
  }
}

/** GPU arrays; see {@link DeviceArrayConstructor}. */
export const DeviceArray: DeviceArrayConstructor = native.DeviceArray;

/**
 * Whether the CUDA kernels can run in this process: `{ available: true }`, or
 * `{ available: false, reason }` saying why not (no CUDA library in this build, no NVIDIA
 * driver, a CUDA error, or no device). Checked once, on first use.
 */
export function available(): CudaStatus {
  return native.cudaStatus();
}
