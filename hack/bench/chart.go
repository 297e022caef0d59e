package main

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var seriesColors = map[string]color.RGBA{
	modeLimit:          {120, 120, 120, 255},
	modeBuiltin:        {230, 120, 20, 255},
	modeSafeJob:        {30, 90, 200, 255},
	modeBuiltinDefault: {240, 190, 140, 255},
	modeSafeJobDefault: {140, 180, 240, 255},
}

// chartSeries picks the first repeat of every mode of a workload, and the
// time axis' end: it fits the runs at the equal, raised rate, so that the
// far slower default-rate runs do not squeeze them (their curves run off
// the panel's right edge, and their end is in the legend).
func chartSeries(results []result, workload string) ([]result, float64) {
	var series []result
	maxT, maxAll := 1.0, 1.0
	for _, m := range modeOrder {
		var first *result
		for i, r := range results {
			if r.Workload == workload && r.Mode == m && (first == nil || r.Repeat < first.Repeat) {
				first = &results[i]
			}
		}
		if first == nil {
			continue
		}
		series = append(series, *first)
		if n := len(first.CompletionTimes); n > 0 {
			maxAll = max(maxAll, first.CompletionTimes[n-1])
			if m != modeBuiltinDefault && m != modeSafeJobDefault {
				maxT = max(maxT, first.CompletionTimes[n-1])
			}
		}
	}
	if maxT == 1.0 {
		maxT = maxAll
	}
	return series, maxT * 1.05
}

// succeededCurve is the fraction of a run's pods that had succeeded over
// time, one point per success (thinned to at most 400 points).
func succeededCurve(times []float64) plotter.XYs {
	n := len(times)
	step := max(1, n/400)
	pts := plotter.XYs{{X: 0, Y: 0}}
	for i := 0; i < n; i += step {
		pts = append(pts, plotter.XY{X: times[i], Y: 100 * float64(i+1) / float64(n)})
	}
	if n > 0 {
		pts = append(pts, plotter.XY{X: times[n-1], Y: 100})
	}
	return pts
}

// workloadPlot draws one workload's panel: the percentage of pods succeeded
// over the seconds since the first create, a line per mode.
func workloadPlot(w workload, results []result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s", w.Name, w.Desc)
	p.X.Label.Text = "seconds since the first create"
	p.Y.Label.Text = "pods succeeded (%)"
	p.Y.Min, p.Y.Max = 0, 100
	series, maxT := chartSeries(results, w.Name)
	p.X.Min, p.X.Max = 0, maxT
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -vg.Millimeter, vg.Millimeter*8
	p.Add(plotter.NewGrid())
	for _, r := range series {
		if len(r.CompletionTimes) == 0 {
			continue
		}
		pts := succeededCurve(r.CompletionTimes)
		for i := range pts {
			pts[i].X = min(pts[i].X, maxT) // a default-rate run ends off the panel
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", w.Name, r.Mode, err)
		}
		line.Color, line.Width = seriesColors[r.Mode], vg.Points(1.5)
		if strings.Contains(r.Mode, "default") {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (last at %.0f s)", r.Mode, r.CompletionTimes[len(r.CompletionTimes)-1]), line)
	}
	return p, nil
}

// writeChart draws, per workload side by side, pods succeeded over time of
// the first repeat of every mode: a PNG at path and an SVG beside it.
func writeChart(path string, ws []workload, results []result) error {
	const panelW, panelH = 5 * vg.Inch, 3.6 * vg.Inch
	cols := max(len(ws), 1)
	width := panelW * vg.Length(cols)
	svgPath := strings.TrimSuffix(path, filepath.Ext(path)) + ".svg"
	for _, out := range []canvasOut{pngCanvas(path, width, panelH), svgCanvas(svgPath, width, panelH)} {
		tiles := draw.Tiles{Rows: 1, Cols: cols, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2,
			PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		for k, w := range ws {
			p, err := workloadPlot(w, results)
			if err != nil {
				return err
			}
			p.Draw(tiles.At(out.canvas, k, 0))
		}
		if err := out.save(); err != nil {
			return fmt.Errorf("writing %s: %w", out.path, err)
		}
	}
	return nil
}

// canvasOut is a canvas and how to write it to its file.
type canvasOut struct {
	path   string
	canvas draw.Canvas
	save   func() error
}

func pngCanvas(path string, w, h vg.Length) canvasOut {
	c := vgimg.New(w, h)
	return canvasOut{path: path, canvas: draw.New(c), save: func() error {
		return writeFile(path, vgimg.PngCanvas{Canvas: c})
	}}
}

func svgCanvas(path string, w, h vg.Length) canvasOut {
	c := vgsvg.New(w, h)
	return canvasOut{path: path, canvas: draw.New(c), save: func() error { return writeFile(path, c) }}
}

func writeFile(path string, w io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the chart: %w", err)
	}
	if _, err := w.WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("drawing the chart: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing the chart: %w", err)
	}
	return nil
}

// sizeChartPath is where the chart by size goes, beside the main chart.
func sizeChartPath(chart string) string {
	return strings.TrimSuffix(chart, filepath.Ext(chart)) + "-sizes.png"
}

// sizeMetrics are the panels of the chart by size: a value per completion
// of a mode's median run.
var sizeMetrics = []struct {
	label string
	value func(s summary, completions int) float64
}{
	{"kube-apiserver CPU ms per completion", func(s summary, _ int) float64 { return s.apiCPU }},
	{"completions per second", func(s summary, _ int) float64 { return s.perSec }},
}

// writeSizeChart draws, for every workload run at several sizes, the
// kube-apiserver's CPU per completion and the throughput against the
// number of completions (log scale), a line per mode: a PNG at path and an
// SVG beside it. Without such a workload it writes nothing.
func writeSizeChart(path string, results []result) error {
	var ws []workload
	seen := map[string]bool{}
	for _, r := range results {
		if r.Base != "" && !seen[r.Workload] {
			seen[r.Workload] = true
			ws = append(ws, workload{Name: r.Workload, Base: r.Base, Size: r.Size, Jobs: 1, Completions: int32(r.Completions)})
		}
	}
	bases, groups := sizeGroups(ws)
	if len(bases) == 0 {
		return nil
	}
	const panelW, panelH = 4.5 * vg.Inch, 3.2 * vg.Inch
	cols, rows := len(bases), len(sizeMetrics)
	svgPath := strings.TrimSuffix(path, filepath.Ext(path)) + ".svg"
	for _, out := range []canvasOut{pngCanvas(path, panelW*vg.Length(cols), panelH*vg.Length(rows)),
		svgCanvas(svgPath, panelW*vg.Length(cols), panelH*vg.Length(rows))} {
		tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
			PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		for c, base := range bases {
			for r, metric := range sizeMetrics {
				p, err := sizePlot(base, groups[base], results, metric.label, metric.value)
				if err != nil {
					return err
				}
				p.Draw(tiles.At(out.canvas, c, r))
			}
		}
		if err := out.save(); err != nil {
			return fmt.Errorf("writing %s: %w", out.path, err)
		}
	}
	return nil
}

// sizePlot draws one metric of one workload against its completions.
func sizePlot(base string, sizes []workload, results []result, label string,
	value func(summary, int) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = base + " by size"
	p.X.Label.Text = "completions (log scale)"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Y.Label.Text = label
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	for _, m := range []string{modeLimit, modeBuiltin, modeSafeJob} {
		var pts plotter.XYs
		for _, w := range sizes {
			if s, ok := summarise(results, w.Name, m); ok {
				pts = append(pts, plotter.XY{X: float64(w.total()), Y: value(s, w.total())})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", base, m, err)
		}
		line.Color, points.Color = seriesColors[m], seriesColors[m]
		p.Add(line, points)
		p.Legend.Add(m, line, points)
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}
