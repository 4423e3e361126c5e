package main

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
)

// screenshot renders the SVG file in headless Chromium (Debian's chromium)
// at its own size and returns the screenshot. Without chromium it skips,
// and fails under CI=true, where .ci/run installs it.
func screenshot(t *testing.T, svgPath string, w, h int) image.Image {
	t.Helper()
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; .ci/run installs Debian's chromium")
		}
		t.Skip("chromium is not installed (apt-get install chromium): the SVG is not rendered")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--force-device-scale-factor=1", "--hide-scrollbars",
		fmt.Sprintf("--window-size=%d,%d", w, h), "--screenshot="+out, "file://"+svgPath)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "chromium: %s", msg)
	f, err := os.Open(out)
	require.NoError(t, err, "chromium wrote no screenshot: %s", msg)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	return img
}

// near reports whether the pixel at (x, y) is within tol of c in every
// channel.
func near(img image.Image, x, y int, c rgb, tol int) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	d := func(a uint32, b uint8) bool { return math.Abs(float64(a>>8)-float64(b)) <= float64(tol) }
	return d(r, c.R) && d(g, c.G) && d(b, c.B)
}

func pixel(img image.Image, x, y int) string {
	r, g, b, _ := img.At(x, y).RGBA()
	return rgb{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}.String()
}

// The timeline as a person sees it in a browser: the screenshot is not
// blank, every sandbox's bar is where its start and end put it and has its
// outcome's colour, the row right of a bar is empty, and the preserve
// deadline and SIGKILL are lines at their times.
func TestSVGTimelineInChromium(t *testing.T) {
	for _, file := range []string{"sandboxd-lost4.json", "sandboxd-late-sigterm.json"} {
		t.Run(file, func(t *testing.T) {
			rep, _, _, err := loadReport(filepath.Join("testdata", file))
			require.NoError(t, err)
			svgPath := filepath.Join(t.TempDir(), "timeline.svg")
			code, _, errw := drainkit(t, "report", "-svg", svgPath, filepath.Join("testdata", file))
			require.Equal(t, exitNoFit, code, errw)
			l := newLayout(rep)
			img := screenshot(t, svgPath, l.Width, l.Height)
			require.GreaterOrEqual(t, img.Bounds().Dx(), l.Width)
			require.GreaterOrEqual(t, img.Bounds().Dy(), l.Height)

			// Not blank: a good share of the picture is drawn, in many colours.
			inked, colours := 0, map[string]bool{}
			for y := 0; y < l.Height; y++ {
				for x := 0; x < l.Width; x++ {
					if !near(img, x, y, rgb{255, 255, 255}, 8) {
						inked++
					}
					colours[pixel(img, x, y)] = true
				}
			}
			assert.Greater(t, inked, l.Width*l.Height/50, "the screenshot is nearly blank")
			assert.Greater(t, len(colours), 10, "the screenshot has too few colours")

			lineXs := make([]float64, 0, len(l.Lines))
			for _, ln := range l.Lines {
				lineXs = append(lineXs, l.X(ln.At))
			}
			clear := func(x float64) bool { // no deadline line within 4 px
				for _, lx := range lineXs {
					if math.Abs(lx-x) < 4 {
						return false
					}
				}
				return true
			}
			checked := 0
			for i, e := range l.Rows {
				y, h := l.RowY(i)
				x0, x1 := l.Bar(i, rep)
				cy := int(y + h/2)
				if cx := (x0 + x1) / 2; x1-x0 >= 3 && clear(cx) {
					want := outcomeColour[e.Outcome]
					if e.Outcome == "not_started" { // light inside a grey outline
						want = notStartedFill
						if h < 4 {
							continue
						}
					}
					assert.True(t, near(img, int(cx), cy, want, 40), "%s (%s) at (%d,%d) is %s, want %s",
						e.ID, e.Outcome, int(cx), cy, pixel(img, int(cx), cy), want)
					checked++
				}
				if ex := x1 + 6; ex < l.right-2 && clear(ex) && h >= 2 {
					assert.True(t, near(img, int(ex), int(y+h/2), rgb{255, 255, 255}, 30),
						"row of %s right of its bar at (%d,%d) is %s, want white", e.ID, int(ex), int(y+h/2), pixel(img, int(ex), int(y+h/2)))
				}
			}
			assert.Greater(t, checked, len(l.Rows)/2, "too few bars could be sampled")

			pres := rep.Phase(drain.PhasePreserve)
			for _, ln := range []vline{{"preserve deadline", pres.Deadline, deadlineColour, false}, {"SIGKILL", rep.Budget.Kill, killColour, false}} {
				x := int(l.X(ln.At))
				y := int(l.RowTop) + 2
				assert.True(t, near(img, x, y, ln.Colour, 50), "%s line at x=%d is %s, want %s", ln.Label, x, pixel(img, x, y), ln.Colour)
			}
		})
	}
}
