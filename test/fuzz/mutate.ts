/**
 * The fuzzer's moves on a valid call: re-homing its arrays into other kinds of memory (the
 * call stays valid and must give the same result), and adversarial mutations (wrong types,
 * bad sizes and values, getters and Proxies that throw, detach or resize buffers while the
 * addon reads the options, aliased outputs).
 */
import type { Random } from '../support.js';
import { ARRAY_TYPES, type ArrayKind, type OpSpec, type Options } from './ops.js';

type Typed = Float32Array | Uint8Array | Int32Array | Uint16Array;

/** What a fuzzer getter or Proxy throws: the addon must let it through unchanged. */
export const GETTER_ERROR = new Error('fuzz: thrown by a getter of the options');

/** A mutation or re-homing: `plain` when the options stay plain data (no getters, no aliasing) whose result can be checked. */
export interface Move {
  label: string;
  plain: boolean;
}

// ArrayBuffer(n, { maxByteLength }) and SharedArrayBuffer(n, { maxByteLength }) are ES2024: Node 20 has them, lib es2023 does not.
type Growable = { new (bytes: number, options: { maxByteLength: number }): ArrayBufferLike };
const ResizableArrayBuffer = ArrayBuffer as unknown as Growable;
const GrowableSharedArrayBuffer = SharedArrayBuffer as unknown as Growable;
type Resizable = ArrayBufferLike & { resize?(bytes: number): void; grow?(bytes: number): void; resizable?: boolean; growable?: boolean };

function kindOf(array: Typed): ArrayKind {
  if (array instanceof Float32Array) return 'f32';
  if (array instanceof Uint8Array) return 'u8';
  if (array instanceof Int32Array) return 'i32';
  return 'u16';
}

/** The names of the typed-array fields of `options` (outputs included, as 'out' or 'out.x'). */
function arrayPaths(options: Options): string[] {
  const paths = Object.keys(options).filter((k) => ArrayBuffer.isView(options[k]));
  const out = options.out;
  if (out !== null && typeof out === 'object' && !ArrayBuffer.isView(out)) {
    for (const k of Object.keys(out)) if (ArrayBuffer.isView((out as Options)[k])) paths.push(`out.${k}`);
  }
  return paths;
}

function get(options: Options, path: string): unknown {
  return path.startsWith('out.') ? (options.out as Options)[path.slice(4)] : options[path];
}

function set(options: Options, path: string, value: unknown): void {
  if (path.startsWith('out.')) (options.out as Options)[path.slice(4)] = value;
  else options[path] = value;
}

// ---------------------------------------------------------------- re-homing (valid calls)

/** A copy of `array` at element offset `offset` of a buffer made by `make` (`tracking`: a length-tracking view). */
function copyInto(array: Typed, make: (bytes: number) => ArrayBufferLike, offset: number, tracking: boolean): Typed {
  const Type = ARRAY_TYPES[kindOf(array)] as unknown as new (buffer: ArrayBufferLike, byteOffset: number, length?: number) => Typed;
  const bytes = (offset + array.length) * array.BYTES_PER_ELEMENT;
  const view = tracking ? new Type(make(bytes), offset * array.BYTES_PER_ELEMENT) : new Type(make(bytes + 8), offset * array.BYTES_PER_ELEMENT, array.length);
  view.set(array);
  return view;
}

const HOMES: readonly { label: string; copy: (a: Typed, rng: Random) => Typed }[] = [
  { label: 'SharedArrayBuffer', copy: (a) => copyInto(a, (n) => new SharedArrayBuffer(n), 0, false) },
  { label: 'growable SharedArrayBuffer', copy: (a, rng) => copyInto(a, (n) => new GrowableSharedArrayBuffer(n, { maxByteLength: 2 * n + 64 }), 0, rng.next() < 0.5) },
  { label: 'resizable ArrayBuffer', copy: (a, rng) => copyInto(a, (n) => new ResizableArrayBuffer(n, { maxByteLength: 2 * n + 64 }), 0, rng.next() < 0.5) },
  { label: 'odd offset', copy: (a, rng) => copyInto(a, (n) => new ArrayBuffer(n), rng.int(1, 8), false) },
  { label: 'odd offset in a SharedArrayBuffer', copy: (a, rng) => copyInto(a, (n) => new SharedArrayBuffer(n), rng.int(1, 8), false) },
];

/** Moves some of the call's arrays (inputs and outputs) into other memory; values unchanged. */
export function rehome(options: Options, rng: Random): Move {
  const labels: string[] = [];
  for (const path of arrayPaths(options)) {
    if (rng.next() < 0.5) continue;
    const array = get(options, path) as Typed;
    // The in-place backward stays in place: out is the logits array itself.
    if (path === 'out' && options.out === options.logits) continue;
    const home = rng.pick(HOMES);
    const copy = home.copy(array, rng);
    if (options.out === array && path === 'logits') options.out = copy;
    set(options, path, copy);
    labels.push(`${path} in ${home.label}`);
  }
  return { label: labels.length ? labels.join(', ') : 'plain arrays', plain: true };
}

// ---------------------------------------------------------------- adversarial values

function detachedArray(kind: ArrayKind, n: number): Typed {
  const array = new ARRAY_TYPES[kind](n);
  structuredClone(array.buffer, { transfer: [array.buffer as ArrayBuffer] });
  return array;
}

/** Values of every JavaScript type and of the wrong shape. */
const JUNK: readonly ((rng: Random) => unknown)[] = [
  () => undefined,
  () => null,
  () => 'a string',
  () => '',
  () => '0.2',
  () => true,
  () => false,
  () => 0,
  () => -0,
  () => -1,
  () => 1,
  () => 0.5,
  () => 1.5,
  () => NaN,
  () => Infinity,
  () => -Infinity,
  () => 2 ** 31,
  () => 2 ** 32 + 1,
  () => 2 ** 53,
  () => 2 ** 63,
  () => -(2 ** 53),
  () => 1e300,
  () => Number.MIN_VALUE,
  () => 10n,
  () => Symbol('fuzz'),
  () => ({}),
  () => Object.create(null),
  () => [],
  () => [0, 1, 2],
  () => new Map(),
  () => new Date(0),
  () => () => 0,
  () => Promise.resolve(1),
  () => new Proxy({}, {}),
  () => new Proxy(new Float32Array(4), {}),
  () => new ArrayBuffer(16),
  () => new DataView(new ArrayBuffer(16)),
  () => new Float64Array(4),
  () => new Int8Array(4),
  () => new Uint8ClampedArray(4),
  () => new Int16Array(4),
  () => new Uint32Array(4),
  () => new BigInt64Array(2),
  () => new BigUint64Array(2),
  (rng) => new ARRAY_TYPES[rng.pick(['f32', 'u8', 'i32', 'u16'] as const)](rng.int(0, 9)),
  (rng) => detachedArray(rng.pick(['f32', 'u8', 'i32', 'u16'] as const), 4),
  (rng) => rng.pick(['token-mean', 'k3', 'sequence', 'bf16', 'f32', 'sigmoid', 'ipo']),
];

function junk(rng: Random): unknown {
  return rng.pick(JUNK)(rng);
}

/** A name the op reads: an argument, `out` or one of its members. */
function fieldName(spec: OpSpec, rng: Random): string {
  const names = [...spec.arguments.map((a) => a.name), 'out'];
  if (spec.outMembers) for (const m of Object.keys(spec.outMembers)) names.push(`out.${m}`);
  return rng.pick(names);
}

function setField(options: Options, path: string, value: unknown): void {
  if (path.startsWith('out.')) {
    const out = options.out;
    options.out = out !== null && typeof out === 'object' && !ArrayBuffer.isView(out) ? { ...(out as Options) } : {};
  }
  set(options, path, value);
}

/** An Int32Array of offsets broken in one way. */
function badOffsets(offsets: Int32Array, n: number, rng: Random): { value: Int32Array; how: string } {
  const value = Int32Array.from(offsets);
  const b = value.length - 1;
  const i = rng.int(0, value.length);
  switch (rng.int(0, 7)) {
    case 0:
      value[0] = rng.pick([1, -1, 2 ** 31 - 1, -(2 ** 31)]);
      return { value, how: `seqOffsets[0] = ${value[0]}` };
    case 1:
      value[b] = n + rng.pick([1, -1, 1000, 2 ** 30]);
      return { value, how: 'seqOffsets not ending at N' };
    case 2:
      value[i] = rng.pick([-1, -(2 ** 31), 2 ** 31 - 1, n + 1]);
      return { value, how: `seqOffsets[${i}] = ${value[i]}` };
    case 3: {
      if (b >= 2) [value[1], value[2]] = [value[2] + 1, value[1]];
      return { value, how: 'seqOffsets out of order' };
    }
    case 4:
      return { value: new Int32Array(0), how: 'seqOffsets empty' };
    case 5:
      return { value: Int32Array.from([0, ...offsets.slice(1).map(() => rng.int(-5, n + 5))]), how: 'seqOffsets random' };
    default:
      return { value: value.subarray(0, rng.int(0, value.length)), how: 'seqOffsets truncated' };
  }
}

/** An array argument of the same kind and another length. */
function resized(array: Typed, rng: Random): Typed {
  const n = rng.pick([0, 1, array.length - 1, array.length + 1, array.length * 2 + 3].filter((x) => x >= 0 && x !== array.length));
  const out = new ARRAY_TYPES[kindOf(array)](n);
  out.set(array.subarray(0, Math.min(n, array.length)));
  return out;
}

/** A getter on `options[name]` that runs `effect` and then gives the value (or throws). */
function defineGetter(options: Options, name: string, effect: () => void): void {
  const value = options[name];
  Object.defineProperty(options, name, {
    enumerable: true,
    configurable: true,
    get() {
      effect();
      return value;
    },
  });
}

/** Detaches, shrinks or grows the buffer of `array` (whichever its buffer allows). */
export function disturb(array: Typed, rng: Random): string {
  const buffer = array.buffer as Resizable;
  try {
    if (buffer.resizable && buffer.resize) {
      const bytes = rng.pick([0, Math.floor(buffer.byteLength / 2), buffer.byteLength + 64]);
      buffer.resize(bytes);
      return `resized to ${bytes} bytes`;
    }
    if (buffer.growable && buffer.grow) {
      buffer.grow(buffer.byteLength + 8);
      return 'grown';
    }
    if (buffer instanceof SharedArrayBuffer) {
      array.fill(rng.pick([NaN, 0, -1, 2 ** 31 - 1]) as never);
      return 'overwritten';
    }
    structuredClone(buffer, { transfer: [buffer as ArrayBuffer] });
    return 'detached';
  } catch {
    return 'left alone';
  }
}

const MUTATIONS: readonly ((spec: OpSpec, o: Options, rng: Random) => Move & { proxy?: Options })[] = [
  // A field of the wrong type or value.
  (spec, o, rng) => {
    const name = fieldName(spec, rng);
    const value = junk(rng);
    setField(o, name, value);
    return { label: `${name} = junk (${typeof value})`, plain: true };
  },
  // A required argument missing.
  (spec, o, rng) => {
    const required = spec.arguments.filter((a) => a.required);
    const name = rng.pick(required).name;
    delete o[name];
    return { label: `${name} missing`, plain: true };
  },
  // An array of the right kind and another length.
  (_spec, o, rng) => {
    const paths = arrayPaths(o);
    if (paths.length === 0) return { label: 'no array to resize', plain: true };
    const path = rng.pick(paths);
    set(o, path, resized(get(o, path) as Typed, rng));
    return { label: `${path} of another length`, plain: true };
  },
  // An array of another kind, same length.
  (_spec, o, rng) => {
    const paths = arrayPaths(o);
    if (paths.length === 0) return { label: 'no array to retype', plain: true };
    const path = rng.pick(paths);
    const array = get(o, path) as Typed;
    const Type = rng.pick([Float64Array, Int8Array, Uint8ClampedArray, Uint32Array, Int16Array, Float32Array, Uint8Array, Int32Array, Uint16Array]);
    set(o, path, new Type(array.length));
    return { label: `${path} as ${Type.name}`, plain: true };
  },
  // Values out of range: offsets, labels, roles.
  (spec, o, rng) => {
    if (o.seqOffsets instanceof Int32Array && rng.next() < 0.6) {
      const n = ((o.logp ?? o.roles ?? o.mask) as Typed).length;
      const bad = badOffsets(o.seqOffsets, n, rng);
      o.seqOffsets = bad.value;
      return { label: bad.how, plain: true };
    }
    if (o.labels instanceof Int32Array && o.labels.length > 0) {
      const labels = Int32Array.from(o.labels);
      const v = o.vocabSize as number;
      labels[rng.int(0, labels.length)] = rng.pick([v, v + 1, -1, 2 ** 31 - 1, -(2 ** 31)]);
      o.labels = labels;
      return { label: 'a label out of range', plain: true };
    }
    if (o.roles instanceof Uint8Array && o.roles.length > 0) {
      const roles = Uint8Array.from(o.roles);
      roles[rng.int(0, roles.length)] = rng.int(4, 256);
      o.roles = roles;
      return { label: 'a role out of range', plain: true };
    }
    const choices = spec.arguments.filter((a) => a.kind === 'choice');
    if (choices.length > 0 && rng.next() < 0.3) {
      const choice = rng.pick(choices);
      const near = rng.pick(choice.choices!);
      o[choice.name] = rng.pick([near.toUpperCase(), `${near} `, near.slice(1), `${near}\0`, '']);
      return { label: `${choice.name} = a near miss of '${near}'`, plain: true };
    }
    const numbers = spec.arguments.filter((a) => a.kind === 'number' || a.kind === 'integer');
    if (numbers.length === 0) return { label: 'nothing out of range', plain: true };
    const name = rng.pick(numbers).name;
    o[name] = rng.pick([-1, 0, 1, 0.5, 1 - 1e-16, 2 ** 53 + 2, -1e-300, 1e30, 1e300]);
    return { label: `${name} = ${o[name]}`, plain: true };
  },
  // A getter that throws.
  (spec, o, rng) => {
    const name = rng.pick([...spec.arguments.map((a) => a.name), 'out']);
    if (!(name in o)) o[name] = undefined;
    defineGetter(o, name, () => {
      throw GETTER_ERROR;
    });
    return { label: `getter of ${name} throws`, plain: false };
  },
  // A getter that detaches, shrinks or grows the buffer of another argument while the addon reads the options.
  (spec, o, rng) => {
    const paths = arrayPaths(o);
    if (paths.length === 0) return { label: 'no array to disturb', plain: true };
    const path = rng.pick(paths);
    if (rng.next() < 0.5) set(o, path, rng.pick(HOMES.slice(1, 3)).copy(get(o, path) as Typed, rng));
    const target = get(o, path) as Typed;
    const name = rng.pick([...spec.arguments.map((a) => a.name), 'out']);
    if (!(name in o)) o[name] = undefined;
    defineGetter(o, name, () => {
      disturb(target, rng);
    });
    return { label: `getter of ${name} disturbs ${path}`, plain: false };
  },
  // The options object is a Proxy that throws or lies about one key.
  (spec, o, rng) => {
    const key = fieldName(spec, rng).replace(/^out\./, '');
    const lie = junk(rng);
    const throws = rng.next() < 0.5;
    const proxy = new Proxy(o, {
      get(target, property, receiver) {
        if (property === key) {
          if (throws) throw GETTER_ERROR;
          return lie;
        }
        return Reflect.get(target, property, receiver);
      },
    });
    return { label: `options Proxy ${throws ? 'throwing' : 'lying'} on ${key}`, plain: false, proxy };
  },
  // An output aliasing an input (undefined results, but never a crash).
  (spec, o, rng) => {
    const inputs = Object.keys(o).filter((k) => ArrayBuffer.isView(o[k]) && k !== 'out');
    if (inputs.length === 0) return { label: 'no input to alias', plain: true };
    const input = rng.pick(inputs);
    if (spec.outMembers) {
      const member = rng.pick(Object.keys(spec.outMembers));
      o.out = { [member]: o[input] };
      return { label: `out.${member} aliases ${input}`, plain: false };
    }
    o.out = o[input];
    return { label: `out aliases ${input}`, plain: false };
  },
  // Unknown fields: ignored by some ops, a TypeError naming the field for others (ppoLoss).
  (_spec, o, rng) => {
    o[rng.pick(['extra', 'logP', 'seq_offsets', '__proto__x', 'outs'])] = junk(rng);
    return { label: 'an unknown field', plain: true };
  },
];

/** One adversarial mutation of a valid call, applied in place (`proxy` replaces the options when set). */
export function mutate(spec: OpSpec, options: Options, rng: Random): Move & { proxy?: Options } {
  return rng.pick(MUTATIONS)(spec, options, rng);
}

/** Whole-options junk: not an object, an array, a typed array, a function... */
export function junkOptions(rng: Random): unknown {
  return rng.pick([undefined, null, 0, 'options', 1n, Symbol('o'), [], [{}], new Float32Array(2), () => ({}), true]);
}

/** The typed arrays of a call, for in-flight mutation. */
export function arraysOf(options: Options): Typed[] {
  return arrayPaths(options).map((p) => get(options, p) as Typed);
}
