import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { WindowTopic } from './engine.js';

/**
 * One topic's plotted series over the current window, drawn by uPlot on a canvas, with the
 * playhead as a vertical line (drawn in uPlot's `draw` hook, so moving it redraws without
 * rebuilding paths). At most MAX_POINTS points a series: a denser window is thinned by stride
 * (the readout table, not the plot, gives exact values).
 */

const MAX_POINTS = 2000;
export const SERIES_COLORS = ['#0b5cad', '#c2410c', '#15803d', '#a21caf', '#b45309', '#0e7490', '#be123c', '#4d7c0f'];

/** At most MAX_POINTS of each series, a missing value (NaN in the window) as uPlot's gap (null). */
function thin(w: WindowTopic, keys: readonly string[]): uPlot.AlignedData {
  const stride = Math.max(1, Math.ceil(w.t.length / MAX_POINTS));
  const idx: number[] = [];
  for (let i = 0; i < w.t.length; i += stride) idx.push(i);
  const column = (k: string) => {
    const v = w.values.get(k);
    return idx.map((i) => {
      const x = v?.[i];
      return x === undefined || Number.isNaN(x) ? null : x;
    });
  };
  return [idx.map((i) => w.t[i]!), ...keys.map(column)];
}

export function TopicPlot(props: { topic: string; keys: readonly string[]; colors: readonly string[]; data: WindowTopic; fromS: number; toS: number; playheadS: number }) {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);
  const playhead = useRef(props.playheadS);
  const range = useRef<[number, number]>([props.fromS, props.toS]);
  playhead.current = props.playheadS;
  range.current = [props.fromS, props.toS];
  const keysKey = props.keys.join('\n');

  useEffect(() => {
    const el = host.current;
    if (!el) return;
    const styles = getComputedStyle(el);
    const axisColor = styles.getPropertyValue('--muted').trim() || '#57606a';
    const gridColor = styles.getPropertyValue('--border').trim() || '#d0d7de';
    const lineColor = styles.getPropertyValue('--bad').trim() || '#a40e26';
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height: 180,
      legend: { show: false },
      cursor: { show: false },
      scales: { x: { time: false, range: () => range.current } },
      axes: [
        { stroke: axisColor, grid: { stroke: gridColor, width: 1 }, ticks: { stroke: gridColor }, values: (_u, ticks) => ticks.map((t) => `${Number(t.toFixed(2))} s`) },
        { stroke: axisColor, grid: { stroke: gridColor, width: 1 }, ticks: { stroke: gridColor }, size: 56 },
      ],
      series: [{}, ...props.keys.map((k, i) => ({ label: k, stroke: props.colors[i] ?? SERIES_COLORS[i % SERIES_COLORS.length]!, width: 1.5, spanGaps: true, points: { show: false } }))],
      hooks: {
        draw: [
          (u) => {
            const x = u.valToPos(playhead.current, 'x', true);
            const ctx = u.ctx;
            ctx.save();
            ctx.strokeStyle = lineColor;
            ctx.lineWidth = 2 * devicePixelRatio;
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
            ctx.restore();
          },
        ],
      },
    };
    const u = new uPlot(opts, thin(props.data, props.keys), el);
    chart.current = u;
    const ro = new ResizeObserver(() => u.setSize({ width: Math.max(200, el.clientWidth), height: 180 }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      u.destroy();
      chart.current = null;
    };
    // Rebuilt when the series change; data and playhead update the existing chart below.
  }, [keysKey]);

  useEffect(() => {
    chart.current?.setData(thin(props.data, props.keys));
  }, [props.data]);

  useEffect(() => {
    chart.current?.redraw(false, false);
  }, [props.playheadS, props.fromS, props.toS]);

  return <div class="player-plot" ref={host} role="img" aria-label={`${props.topic}: ${props.keys.join(', ')} over ${Number((props.toS - props.fromS).toFixed(1))} s around the playhead`} />;
}
