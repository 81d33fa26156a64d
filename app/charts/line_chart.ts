/**
 * Line charts of training metrics, stacked in panels that share the x axis, rendered
 * from the same layout as SVG (for pages) and PNG (for terminals, READMEs and tools
 * that show pictures).
 */
import { Raster, type Rgb } from './raster.js';

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

/** The chart as a PNG file. */
export function renderPng(panels: Panel[], options: ChartOptions): Buffer {
  const l = layout(panels, options);
  const raster = new Raster(l.width, l.height);
  const black: Rgb = [0, 0, 0];
  const grey: Rgb = [150, 150, 150];
  const light: Rgb = [229, 229, 229];
  const sx = (x: number) => l.left + ((x - l.x0) / (l.x1 - l.x0)) * (l.right - l.left);
  raster.text((l.width - Raster.textWidth(options.title, 2)) / 2, 10, options.title, black, 2);
  for (const { top, bottom, y0, y1, panel } of l.panels) {
    const sy = (y: number) => bottom - ((y - y0) / (y1 - y0)) * (bottom - top);
    raster.text(l.left, top - 16, panel.title, black);
    for (const t of niceTicks(y0, y1, 4)) {
      raster.line(l.left, sy(t), l.right, sy(t), light);
      const label = formatTick(t);
      raster.text(l.left - 6 - Raster.textWidth(label), sy(t) - 3, label, black);
    }
    raster.line(l.left, top, l.right, top, grey);
    raster.line(l.left, bottom, l.right, bottom, grey);
    raster.line(l.left, top, l.left, bottom, grey);
    raster.line(l.right, top, l.right, bottom, grey);
    let legendX = l.right;
    for (const series of [...panel.series].reverse()) {
      const points = series.points.filter(([, y]) => Number.isFinite(y));
      for (let i = 1; i < points.length; i++) {
        raster.line(sx(points[i - 1][0]), sy(points[i - 1][1]), sx(points[i][0]), sy(points[i][1]), series.color, 2);
      }
      legendX -= Raster.textWidth(series.name) + 24;
      raster.fillRect(legendX, top - 14, 12, 4, series.color);
      raster.text(legendX + 16, top - 16, series.name, black);
    }
  }
  const last = l.panels[l.panels.length - 1];
  for (const t of niceTicks(l.x0, l.x1, 8)) {
    const label = formatTick(t);
    raster.text(sx(t) - Raster.textWidth(label) / 2, last.bottom + 8, label, black);
  }
  raster.text((l.left + l.right - Raster.textWidth(options.xLabel)) / 2, l.height - 16, options.xLabel, black);
  return raster.toPng();
}
