/**
 * A tiny RGB raster with lines, rectangles and bitmap text, encoded to PNG with
 * node:zlib: charts as pictures without a browser, canvas or native module.
 */
import { deflateSync } from 'node:zlib';

import { GLYPH_HEIGHT, GLYPH_WIDTH, glyph } from './font.js';

export type Rgb = readonly [number, number, number];

export class Raster {
  readonly width: number;
  readonly height: number;
  private readonly pixels: Uint8Array;

  constructor(width: number, height: number, background: Rgb = [255, 255, 255]) {
    this.width = width;
    this.height = height;
    this.pixels = new Uint8Array(width * height * 3);
    this.fillRect(0, 0, width, height, background);
  }

  setPixel(x: number, y: number, color: Rgb): void {
    x = Math.round(x);
    y = Math.round(y);
    if (x < 0 || y < 0 || x >= this.width || y >= this.height) return;
    const i = (y * this.width + x) * 3;
    this.pixels[i] = color[0];
    this.pixels[i + 1] = color[1];
    this.pixels[i + 2] = color[2];
  }

  fillRect(x: number, y: number, w: number, h: number, color: Rgb): void {
    for (let j = Math.max(0, Math.round(y)); j < Math.min(this.height, Math.round(y + h)); j++) {
      for (let i = Math.max(0, Math.round(x)); i < Math.min(this.width, Math.round(x + w)); i++) this.setPixel(i, j, color);
    }
  }

  /** A line `thickness` pixels wide (Bresenham with a square pen). */
  line(x0: number, y0: number, x1: number, y1: number, color: Rgb, thickness = 1): void {
    const steps = Math.max(Math.abs(x1 - x0), Math.abs(y1 - y0), 1);
    const half = (thickness - 1) / 2;
    for (let s = 0; s <= steps; s++) {
      const x = x0 + ((x1 - x0) * s) / steps;
      const y = y0 + ((y1 - y0) * s) / steps;
      this.fillRect(x - half, y - half, thickness, thickness, color);
    }
  }

  /** Text with its top-left corner at (x, y); `scale` multiplies the 5x7 glyphs. */
  text(x: number, y: number, text: string, color: Rgb, scale = 1): void {
    for (const [index, char] of [...text].entries()) {
      const rows = glyph(char);
      const left = x + index * (GLYPH_WIDTH + 1) * scale;
      rows.forEach((bits, row) => {
        for (let col = 0; col < GLYPH_WIDTH; col++) {
          if (bits & (1 << (GLYPH_WIDTH - 1 - col))) this.fillRect(left + col * scale, y + row * scale, scale, scale, color);
        }
      });
    }
  }

  /** Width in pixels of `text` at `scale`. */
  static textWidth(text: string, scale = 1): number {
    return text.length * (GLYPH_WIDTH + 1) * scale;
  }

  static get textHeight(): number {
    return GLYPH_HEIGHT;
  }

  /** The raster as a PNG file (8-bit RGB, no interlace). */
  toPng(): Buffer {
    const stride = this.width * 3 + 1;
    const raw = Buffer.alloc(stride * this.height);
    for (let y = 0; y < this.height; y++) {
      raw[y * stride] = 0; // filter: none
      raw.set(this.pixels.subarray(y * this.width * 3, (y + 1) * this.width * 3), y * stride + 1);
    }
    const header = Buffer.alloc(13);
    header.writeUInt32BE(this.width, 0);
    header.writeUInt32BE(this.height, 4);
    header[8] = 8; // bit depth
    header[9] = 2; // colour type: RGB
    return Buffer.concat([
      Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
      chunk('IHDR', header),
      chunk('IDAT', deflateSync(raw)),
      chunk('IEND', Buffer.alloc(0)),
    ]);
  }
}

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([length, body, crc]);
}
