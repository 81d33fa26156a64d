/**
 * Line charts of training metrics, stacked in panels that share the x axis, written as
 * SVG (for pages) and rasterised from that same SVG to PNG (for terminals, READMEs and
 * tools that show pictures) by resvg, whose prebuilt binaries need no compiler.
 */
import { Resvg } from '@resvg/resvg-js';

/** A colour as red, green and blue in [0, 255]. */
export type Rgb = readonly [number, number, number];

export interface Series {
  name: string;
  color: Rgb;
  /** [x, y] points; non-finite y values are skipped. */
  points: ReadonlyArray<readonly [number, number]>;
}

export interface Panel {
  title: string;
  series: Series[];
  /** Fixed y range; default: the data's range, with 0 included. */
  yRange?: readonly [number, number];
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  width?: number;
  panelHeight?: number;
}

interface Layout {
  width: number;
  height: number;
  left: number;
  right: number;
  panels: { top: number; bottom: number; y0: number; y1: number; panel: Panel }[];
  x0: number;
  x1: number;
}

const MARGIN = { left: 70, right: 20, top: 64, gap: 48, bottom: 44 };

function niceTicks(lo: number, hi: number, count: number): number[] {
  const span = hi - lo || 1;
  const rough = span / count;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough) ?? rough;
  const ticks: number[] = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

function formatTick(value: number): string {
  if (value === 0) return '0';
  const abs = Math.abs(value);
  if (abs >= 1000 || abs < 0.01) return value.toExponential(0);
  return String(Number(value.toPrecision(3)));
}

function layout(panels: Panel[], options: ChartOptions): Layout {
  const width = options.width ?? 760;
  const panelHeight = options.panelHeight ?? 170;
  const xs = panels.flatMap((p) => p.series.flatMap((s) => s.points.map(([x]) => x)));
  const x0 = Math.min(...xs, 0);
  const x1 = Math.max(...xs, x0 + 1);
  const placed = panels.map((panel, i) => {
    const ys = panel.series.flatMap((s) => s.points.map(([, y]) => y)).filter(Number.isFinite);
    let [y0, y1] = panel.yRange ?? [Math.min(0, ...ys), Math.max(...ys, 0)];
    if (y1 <= y0) y1 = y0 + 1;
    const top = MARGIN.top + i * (panelHeight + MARGIN.gap);
    return { top, bottom: top + panelHeight, y0, y1, panel };
  });
  const height = MARGIN.top + panels.length * (panelHeight + MARGIN.gap) - MARGIN.gap + MARGIN.bottom;
  return { width, height, left: MARGIN.left, right: width - MARGIN.right, panels: placed, x0, x1 };
}

const hex = (c: Rgb) => `#${c.map((v) => v.toString(16).padStart(2, '0')).join('')}`;
const escapeXml = (s: string) => s.replace(/[<>&"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;' })[c]!);

/** The chart as an SVG document. */
export function renderSvg(panels: Panel[], options: ChartOptions): string {
  const l = layout(panels, options);
  const sx = (x: number) => l.left + ((x - l.x0) / (l.x1 - l.x0)) * (l.right - l.left);
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${l.width}" height="${l.height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${l.width / 2}" y="22" text-anchor="middle" font-size="16" font-weight="bold">${escapeXml(options.title)}</text>`,
  ];
  for (const { top, bottom, y0, y1, panel } of l.panels) {
    const sy = (y: number) => bottom - ((y - y0) / (y1 - y0)) * (bottom - top);
    out.push(`<text x="${l.left}" y="${top - 8}" font-weight="bold">${escapeXml(panel.title)}</text>`);
    for (const t of niceTicks(y0, y1, 4)) {
      out.push(`<line x1="${l.left}" x2="${l.right}" y1="${sy(t)}" y2="${sy(t)}" stroke="#e5e5e5"/>`);
      out.push(`<text x="${l.left - 6}" y="${sy(t) + 4}" text-anchor="end">${formatTick(t)}</text>`);
    }
    out.push(`<rect x="${l.left}" y="${top}" width="${l.right - l.left}" height="${bottom - top}" fill="none" stroke="#999"/>`);
    let legendX = l.right;
    for (const series of [...panel.series].reverse()) {
      const points = series.points.filter(([, y]) => Number.isFinite(y)).map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`);
      out.push(`<polyline fill="none" stroke="${hex(series.color)}" stroke-width="2" points="${points.join(' ')}"/>`);
      legendX -= series.name.length * 7 + 24;
      out.push(`<rect x="${legendX}" y="${top - 17}" width="12" height="4" fill="${hex(series.color)}"/>`);
      out.push(`<text x="${legendX + 16}" y="${top - 12}">${escapeXml(series.name)}</text>`);
    }
  }
  const last = l.panels[l.panels.length - 1];
  for (const t of niceTicks(l.x0, l.x1, 8)) {
    out.push(`<text x="${sx(t)}" y="${last.bottom + 16}" text-anchor="middle">${formatTick(t)}</text>`);
  }
  out.push(`<text x="${(l.left + l.right) / 2}" y="${l.height - 8}" text-anchor="middle">${escapeXml(options.xLabel)}</text>`);
  out.push('</svg>');
  return out.join('\n');
}

/**
 * The chart as a PNG file: {@link renderSvg}'s document rasterised by resvg at its own
 * size, with the machine's fonts for the text (sans-serif; DejaVu Sans where present).
 */
export function renderPng(panels: Panel[], options: ChartOptions): Buffer {
  const resvg = new Resvg(renderSvg(panels, options), {
    background: 'white',
    font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans', sansSerifFamily: 'DejaVu Sans' },
  });
  return resvg.render().asPng();
}
