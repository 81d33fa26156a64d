/**
 * GGUF, the file format llama.cpp loads models from: a header, typed key/value metadata,
 * tensor descriptors, then the tensor data, each tensor aligned. Written from the format's
 * description in ggml-org/ggml `docs/gguf.md` and the loader of ggml-org/llama.cpp
 * (`ggml/src/gguf.cpp`, commit 00ad355e009e83abf98f96a6ded7193b95763681): version 3,
 * little-endian, strings as a u64 byte length and UTF-8 bytes, `general.alignment` (default
 * 32) for the data section and every tensor's offset within it.
 *
 * Only what a float model needs: f32 and f16 tensors, and the metadata value types.
 */
import { checkNonEmptyString, checkPositiveInteger, rangeError, typeError } from '../check.js';

/** GGUF metadata value types (`gguf_type`). */
export const GgufType = {
  uint8: 0, int8: 1, uint16: 2, int16: 3, uint32: 4, int32: 5, float32: 6, bool: 7, string: 8,
  array: 9, uint64: 10, int64: 11, float64: 12,
} as const;
type ScalarTypeName = Exclude<keyof typeof GgufType, 'array'>;

/** A metadata value with its GGUF type; arrays hold values of one scalar type. */
export type GgufValue =
  | { type: Exclude<ScalarTypeName, 'string' | 'bool' | 'uint64' | 'int64'>; value: number }
  | { type: 'uint64' | 'int64'; value: bigint }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'array'; itemType: Exclude<ScalarTypeName, 'uint64' | 'int64'>; value: readonly (number | string | boolean)[] };

/** Tensor element types this module writes and reads (`ggml_type`: F32 = 0, F16 = 1). */
export type GgufTensorType = 'f32' | 'f16';
const TENSOR_TYPE_ID: Record<GgufTensorType, number> = { f32: 0, f16: 1 };

/** A tensor to write: its values in row-major order with the LAST dimension of `shape` contiguous. */
export interface GgufTensor {
  name: string;
  /**
   * The shape as a row-major array, outermost first (`[rows, cols]`: `cols` contiguous). GGUF
   * stores dimensions innermost first (ggml's `ne`), so a `[n_out, n_in]` matrix is written
   * as `ne = [n_in, n_out]`: what ggml's `mul_mat(W, x)` reads as W·x.
   */
  shape: readonly number[];
  type: GgufTensorType;
  data: Float32Array;
}

/** What {@link readGguf} returns. */
export interface GgufFile {
  version: number;
  alignment: number;
  metadata: Map<string, GgufValue>;
  /** Tensors with their values widened to f32, in file order. */
  tensors: GgufTensor[];
}

const MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
const VERSION = 3;
const DEFAULT_ALIGNMENT = 32;

/** Float32 -> IEEE half, round to nearest even (what numpy's astype(float16) and ggml's converters do). */
export function toHalf(value: number): number {
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exponent = (x >>> 23) & 0xff;
  let mantissa = x & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0);
  let e = exponent - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mantissa |= 0x800000;
    const shift = 14 - e;
    let half = mantissa >>> shift;
    const rest = mantissa & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rest > halfway || (rest === halfway && (half & 1))) half++;
    return sign | half;
  }
  let half = (e << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (half & 1))) half++;
  return sign | half;
}

/** IEEE half -> number. */
export function fromHalf(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >>> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 0x1f) return mantissa ? NaN : sign * Infinity;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

/** Grows a byte buffer as values are appended. */
class ByteWriter {
  private bytes = new Uint8Array(1 << 16);
  private view = new DataView(this.bytes.buffer);
  length = 0;

  private reserve(n: number): void {
    if (this.length + n <= this.bytes.length) return;
    let size = this.bytes.length;
    while (size < this.length + n) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.bytes.subarray(0, this.length));
    this.bytes = grown;
    this.view = new DataView(grown.buffer);
  }

  u8(v: number) { this.reserve(1); this.view.setUint8(this.length, v); this.length += 1; }
  i8(v: number) { this.reserve(1); this.view.setInt8(this.length, v); this.length += 1; }
  u16(v: number) { this.reserve(2); this.view.setUint16(this.length, v, true); this.length += 2; }
  i16(v: number) { this.reserve(2); this.view.setInt16(this.length, v, true); this.length += 2; }
  u32(v: number) { this.reserve(4); this.view.setUint32(this.length, v, true); this.length += 4; }
  i32(v: number) { this.reserve(4); this.view.setInt32(this.length, v, true); this.length += 4; }
  f32(v: number) { this.reserve(4); this.view.setFloat32(this.length, v, true); this.length += 4; }
  f64(v: number) { this.reserve(8); this.view.setFloat64(this.length, v, true); this.length += 8; }
  u64(v: bigint | number) { this.reserve(8); this.view.setBigUint64(this.length, BigInt(v), true); this.length += 8; }
  i64(v: bigint) { this.reserve(8); this.view.setBigInt64(this.length, v, true); this.length += 8; }
  raw(b: Uint8Array) { this.reserve(b.length); this.bytes.set(b, this.length); this.length += b.length; }
  string(s: string) { const b = new TextEncoder().encode(s); this.u64(b.length); this.raw(b); }
  pad(alignment: number) { while (this.length % alignment !== 0) this.u8(0); }
  result(): Uint8Array { return this.bytes.slice(0, this.length); }
}

function writeScalar(w: ByteWriter, type: ScalarTypeName, value: number | bigint | string | boolean): void {
  switch (type) {
    case 'uint8': return w.u8(value as number);
    case 'int8': return w.i8(value as number);
    case 'uint16': return w.u16(value as number);
    case 'int16': return w.i16(value as number);
    case 'uint32': return w.u32(value as number);
    case 'int32': return w.i32(value as number);
    case 'float32': return w.f32(value as number);
    case 'float64': return w.f64(value as number);
    case 'bool': return w.u8(value ? 1 : 0);
    case 'string': return w.string(value as string);
    case 'uint64': return w.u64(value as bigint);
    case 'int64': return w.i64(value as bigint);
  }
}

/**
 * Serialises metadata and tensors as a GGUF v3 file. `general.alignment`, when given, must be
 * a uint32 power of two; otherwise the default 32 applies (and is not written).
 *
 * @throws TypeError / RangeError naming the tensor or key that is malformed.
 */
export function writeGguf(metadata: ReadonlyMap<string, GgufValue>, tensors: readonly GgufTensor[]): Uint8Array {
  const alignmentValue = metadata.get('general.alignment');
  let alignment = DEFAULT_ALIGNMENT;
  if (alignmentValue !== undefined) {
    if (alignmentValue.type !== 'uint32' || !Number.isInteger(Math.log2(alignmentValue.value))) {
      throw rangeError("metadata 'general.alignment'", 'a uint32 power of two', alignmentValue.value);
    }
    alignment = alignmentValue.value;
  }
  const names = new Set<string>();
  for (const [i, t] of tensors.entries()) {
    checkNonEmptyString(`tensors[${i}].name`, t.name);
    if (names.has(t.name)) throw rangeError(`tensors[${i}].name`, 'a name no other tensor has', t.name);
    names.add(t.name);
    if (!(t.data instanceof Float32Array)) throw typeError(`tensors[${i}].data`, 'a Float32Array', t.data);
    if (!(t.type in TENSOR_TYPE_ID)) throw rangeError(`tensors[${i}].type`, "'f32' or 'f16'", t.type);
    t.shape.forEach((d, k) => checkPositiveInteger(`tensors[${i}].shape[${k}]`, d));
    const count = t.shape.reduce((a, b) => a * b, 1);
    if (count !== t.data.length) throw rangeError(`tensors[${i}].data.length`, `${count} (the product of its shape)`, t.data.length);
  }

  const w = new ByteWriter();
  w.u32(MAGIC);
  w.u32(VERSION);
  w.u64(tensors.length);
  w.u64(metadata.size);
  for (const [key, entry] of metadata) {
    w.string(key);
    w.u32(GgufType[entry.type]);
    if (entry.type === 'array') {
      w.u32(GgufType[entry.itemType]);
      w.u64(entry.value.length);
      for (const item of entry.value) writeScalar(w, entry.itemType, item);
    } else {
      writeScalar(w, entry.type, entry.value);
    }
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    w.string(t.name);
    w.u32(t.shape.length);
    for (let k = t.shape.length - 1; k >= 0; k--) w.u64(t.shape[k]!);
    w.u32(TENSOR_TYPE_ID[t.type]);
    w.u64(offset);
    offsets.push(offset);
    const bytes = t.data.length * (t.type === 'f32' ? 4 : 2);
    offset += Math.ceil(bytes / alignment) * alignment;
  }
  w.pad(alignment);
  const dataStart = w.length;
  tensors.forEach((t, i) => {
    while (w.length < dataStart + offsets[i]!) w.u8(0);
    if (t.type === 'f32') for (const v of t.data) w.f32(v);
    else for (const v of t.data) w.u16(toHalf(v));
  });
  w.pad(alignment);
  return w.result();
}

/** Reads values back sequentially; throws a RangeError on a truncated or malformed file. */
class ByteReader {
  private readonly view: DataView;
  offset = 0;

  constructor(private readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private need(n: number): number {
    if (this.offset + n > this.bytes.length) throw rangeError('gguf', `at least ${this.offset + n} bytes`, this.bytes.length);
    const at = this.offset;
    this.offset += n;
    return at;
  }

  u8() { return this.view.getUint8(this.need(1)); }
  i8() { return this.view.getInt8(this.need(1)); }
  u16() { return this.view.getUint16(this.need(2), true); }
  i16() { return this.view.getInt16(this.need(2), true); }
  u32() { return this.view.getUint32(this.need(4), true); }
  i32() { return this.view.getInt32(this.need(4), true); }
  f32() { return this.view.getFloat32(this.need(4), true); }
  f64() { return this.view.getFloat64(this.need(8), true); }
  u64() { return this.view.getBigUint64(this.need(8), true); }
  i64() { return this.view.getBigInt64(this.need(8), true); }
  string() {
    const n = Number(this.u64());
    const at = this.need(n);
    return new TextDecoder('utf-8', { fatal: true }).decode(this.bytes.subarray(at, at + n));
  }
}

const TYPE_NAME = Object.fromEntries(Object.entries(GgufType).map(([name, id]) => [id, name])) as Record<number, keyof typeof GgufType>;

function readScalar(r: ByteReader, type: ScalarTypeName): number | bigint | string | boolean {
  switch (type) {
    case 'uint8': return r.u8();
    case 'int8': return r.i8();
    case 'uint16': return r.u16();
    case 'int16': return r.i16();
    case 'uint32': return r.u32();
    case 'int32': return r.i32();
    case 'float32': return r.f32();
    case 'float64': return r.f64();
    case 'bool': return r.u8() !== 0;
    case 'string': return r.string();
    case 'uint64': return r.u64();
    case 'int64': return r.i64();
  }
}

/**
 * Parses a GGUF v3 file with f32/f16 tensors (the ones {@link writeGguf} writes).
 * @throws RangeError on a bad magic, version, type or a truncated file.
 */
export function readGguf(bytes: Uint8Array): GgufFile {
  const r = new ByteReader(bytes);
  const magic = r.u32();
  if (magic !== MAGIC) throw rangeError('gguf magic', `0x${MAGIC.toString(16)} ("GGUF")`, `0x${magic.toString(16)}`);
  const version = r.u32();
  if (version !== VERSION) throw rangeError('gguf version', String(VERSION), version);
  const tensorCount = Number(r.u64());
  const kvCount = Number(r.u64());
  const metadata = new Map<string, GgufValue>();
  for (let i = 0; i < kvCount; i++) {
    const key = r.string();
    const type = TYPE_NAME[r.u32()];
    if (type === undefined) throw rangeError(`gguf metadata '${key}' type`, 'a gguf_type', type);
    if (type === 'array') {
      const itemType = TYPE_NAME[r.u32()];
      if (itemType === undefined || itemType === 'array' || itemType === 'uint64' || itemType === 'int64') {
        throw rangeError(`gguf metadata '${key}' item type`, 'a scalar type other than 64-bit integers', itemType);
      }
      const count = Number(r.u64());
      const value: (number | string | boolean)[] = [];
      for (let k = 0; k < count; k++) value.push(readScalar(r, itemType) as number | string | boolean);
      metadata.set(key, { type, itemType, value });
    } else {
      metadata.set(key, { type, value: readScalar(r, type) } as GgufValue);
    }
  }
  const alignmentValue = metadata.get('general.alignment');
  const alignment = alignmentValue?.type === 'uint32' ? alignmentValue.value : DEFAULT_ALIGNMENT;
  const infos: { name: string; shape: number[]; type: GgufTensorType; offset: number }[] = [];
  for (let i = 0; i < tensorCount; i++) {
    const name = r.string();
    const dims = r.u32();
    const ne: number[] = [];
    for (let k = 0; k < dims; k++) ne.push(Number(r.u64()));
    const typeId = r.u32();
    const type = (Object.keys(TENSOR_TYPE_ID) as GgufTensorType[]).find((t) => TENSOR_TYPE_ID[t] === typeId);
    if (type === undefined) throw rangeError(`gguf tensor '${name}' type`, 'F32 (0) or F16 (1)', typeId);
    infos.push({ name, shape: ne.reverse(), type, offset: Number(r.u64()) });
  }
  const dataStart = Math.ceil(r.offset / alignment) * alignment;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const tensors = infos.map(({ name, shape, type, offset }) => {
    const count = shape.reduce((a, b) => a * b, 1);
    const start = dataStart + offset;
    const size = count * (type === 'f32' ? 4 : 2);
    if (start + size > bytes.length) throw rangeError(`gguf tensor '${name}'`, `data within the file's ${bytes.length} bytes`, start + size);
    const data = new Float32Array(count);
    for (let k = 0; k < count; k++) {
      data[k] = type === 'f32' ? view.getFloat32(start + 4 * k, true) : fromHalf(view.getUint16(start + 2 * k, true));
    }
    return { name, shape, type, data };
  });
  return { version, alignment, metadata, tensors };
}
