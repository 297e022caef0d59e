package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"path/filepath"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

var seriesColors = map[string]color.RGBA{
	modeLimit:          {150, 150, 150, 255},
	modeBuiltin:        {230, 120, 20, 255},
	modeSafeJob:        {30, 90, 200, 255},
	modeBuiltinDefault: {240, 190, 140, 255},
	modeSafeJobDefault: {140, 180, 240, 255},
}

// chartSeries picks the first completed repeat of every mode of a workload
// and the time axis' end. The axis fits the runs at the equal, raised rate;
// the slower default-rate runs leave the panel on the right, and their end is
// written under it.
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

// writeChart draws, per workload, pods succeeded over time of the first
// successful repeat of every mode.
func writeChart(path string, ws []workload, results []result) error {
	const panelW, panelH, margin = 420, 320, 50
	img := image.NewRGBA(image.Rect(0, 0, panelW*max(len(ws), 3), panelH+90))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	for k, w := range ws {
		x0 := k * panelW
		series, maxT := chartSeries(results, w.Name)
		plot := image.Rect(x0+margin, 34, x0+panelW-15, panelH-30)
		drawAxes(img, plot)
		label(img, x0+margin, 20, fmt.Sprintf("%s: %s", w.Name, truncate(w.Desc, 48)))
		label(img, plot.Min.X, plot.Max.Y+16, "0")
		label(img, plot.Min.X+plot.Dx()/2-8, plot.Max.Y+16, fmt.Sprintf("%.0fs", maxT/2))
		label(img, plot.Max.X-40, plot.Max.Y+16, fmt.Sprintf("%.0fs", maxT))
		label(img, x0+4, plot.Min.Y+16, fmt.Sprint(w.total()))
		offPanel := 0
		for _, r := range series {
			c := seriesColors[r.Mode]
			for i, t := range r.CompletionTimes {
				if t > maxT {
					break
				}
				px := plot.Min.X + int(t/maxT*float64(plot.Dx()))
				py := plot.Max.Y - int(float64(i+1)/float64(w.total())*float64(plot.Dy()))
				dot(img, px, py, c)
			}
			if n := len(r.CompletionTimes); n > 0 && r.CompletionTimes[n-1] > maxT {
				label(img, plot.Min.X, plot.Max.Y+30+14*offPanel, fmt.Sprintf("%s: ends at %.0fs ->", r.Mode, r.CompletionTimes[n-1]))
				offPanel++
			}
		}
	}
	// Legend.
	x := 10
	for _, m := range modeOrder {
		c := seriesColors[m]
		draw.Draw(img, image.Rect(x, panelH+55, x+14, panelH+65), &image.Uniform{C: c}, image.Point{}, draw.Src)
		label(img, x+18, panelH+65, m)
		x += 30 + 7*len(m)
	}
	label(img, 10, panelH+85, "pods succeeded over time (first completed repeat; a job is Complete once its controller records it); "+
		"x: seconds since the first create")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the chart's directory: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the chart: %w", err)
	}
	defer func() { _ = f.Close() }()
	if err := png.Encode(f, img); err != nil {
		return fmt.Errorf("writing the chart: %w", err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func drawAxes(img *image.RGBA, r image.Rectangle) {
	black := color.RGBA{0, 0, 0, 255}
	for x := r.Min.X; x <= r.Max.X; x++ {
		img.Set(x, r.Max.Y, black)
	}
	for y := r.Min.Y; y <= r.Max.Y; y++ {
		img.Set(r.Min.X, y, black)
	}
}

func dot(img *image.RGBA, x, y int, c color.RGBA) {
	for dx := -1; dx <= 1; dx++ {
		for dy := -1; dy <= 1; dy++ {
			img.Set(x+dx, y+dy, c)
		}
	}
}

func label(img *image.RGBA, x, y int, s string) {
	d := &font.Drawer{Dst: img, Src: image.Black, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
