// A small live line chart in SVG: the last N samples of one figure, with its latest value.

import { h, svg } from './dom.js';

const W = 300;
const H = 80;

export class LineChart {
  readonly el: HTMLElement;
  private values: number[] = [];
  private line = svg('polyline', { fill: 'none', stroke: 'currentColor', 'stroke-width': 2, 'vector-effect': 'non-scaling-stroke', points: '' });
  private area = svg('polygon', { class: 'area', points: '' });
  private current = h('span', { class: 'value' }, '–');
  private scale: HTMLElement = h('span', { class: 'scale' });

  constructor(
    id: string,
    title: string,
    private format: (v: number) => string,
    /** The top of the scale: fixed (a limit), or the largest value shown when absent. */
    private max: () => number | undefined,
    private keep = 60,
  ) {
    const plot = svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': title });
    plot.append(this.area, this.line);
    this.el = h('figure', { class: 'chart', id, 'data-samples': '0' }, h('figcaption', {}, h('span', {}, title), this.current), plot, this.scale);
  }

  push(v: number): void {
    if (!Number.isFinite(v)) return;
    this.values.push(Math.max(0, v));
    if (this.values.length > this.keep) this.values.shift();
    const top = Math.max(this.max() ?? 0, ...this.values) || 1;
    const step = W / (this.keep - 1);
    const x0 = W - (this.values.length - 1) * step;
    const pts = this.values.map((y, i) => `${(x0 + i * step).toFixed(1)},${(H - (y / top) * (H - 4) - 2).toFixed(1)}`);
    this.line.setAttribute('points', pts.join(' '));
    this.area.setAttribute('points', `${x0.toFixed(1)},${H} ${pts.join(' ')} ${W},${H}`);
    this.current.textContent = this.format(v);
    this.scale.textContent = `of ${this.format(top)}`;
    this.el.setAttribute('data-samples', String(this.values.length));
    this.el.setAttribute('data-last', String(v));
  }
}
