// Runs tirl's JavaScript API (dist/lib, the N-API addon) on cases written by
// test_js_parity.py and writes the results back as JSON, so the Python package's outputs
// can be compared bitwise with the JS API's. Usage: node js_parity.mjs <in.json> <out.json>
// Typed arrays travel as { f32 | u8 | u16 | i32: [...] }; every float32 is exact in JSON.
import { readFileSync, writeFileSync } from 'node:fs';
import * as tirl from '../../dist/lib/index.js';

const ARRAYS = { f32: Float32Array, u8: Uint8Array, u16: Uint16Array, i32: Int32Array };

function decode(value) {
  if (Array.isArray(value)) return value.map(decode);
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value);
    if (keys.length === 1 && ARRAYS[keys[0]]) return ARRAYS[keys[0]].from(value[keys[0]]);
    return Object.fromEntries(keys.map((key) => [key, decode(value[key])]));
  }
  return value;
}

function encode(value) {
  if (ArrayBuffer.isView(value)) return Array.from(value);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, encode(item)]));
  }
  return value;
}

const cases = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const results = cases.map(({ op, options }) => encode(tirl[op](decode(options))));
writeFileSync(process.argv[3], JSON.stringify(results));
