package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// The colours of the timeline, by outcome and by line. The browser test
// samples the screenshot for them.
var (
	outcomeColour = map[pause.Outcome]rgb{
		pause.Preserved:  {0x2e, 0x7d, 0x32},
		pause.Failed:     {0xc6, 0x28, 0x28},
		pause.TimedOut:   {0xef, 0x6c, 0x00},
		pause.NotStarted: {0x9e, 0x9e, 0x9e},
		pause.Vanished:   {0x78, 0x90, 0x9c},
	}
	phaseColours   = []rgb{{0xbb, 0xde, 0xfb}, {0xd1, 0xc4, 0xe9}, {0xc8, 0xe6, 0xc9}, {0xff, 0xe0, 0xb2}, {0xf8, 0xbb, 0xd0}, {0xb2, 0xeb, 0xf2}}
	notStartedFill = rgb{0xe0, 0xe0, 0xe0} // inside the outline of a sandbox never started
	killColour     = rgb{0xd5, 0x00, 0x00}
	sigtermColour  = rgb{0x45, 0x5a, 0x64}
	hardColour     = rgb{0x6a, 0x1b, 0x9a}
	deadlineColour = rgb{0x15, 0x65, 0xc0}
)

type rgb struct{ R, G, B uint8 }

func (c rgb) String() string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// A layout places a Report on the timeline: x from a time, y of each row.
// The SVG is drawn from it, and the browser test checks pixels against it.
type layout struct {
	Width, Height int
	t0, tEnd      time.Time
	left, right   float64 // the time axis spans [left, right] in pixels
	PhaseTop      float64 // the phase band
	PhaseHeight   float64
	RowTop        float64 // the first sandbox row
	RowHeight     float64 // rows are RowHeight apart; a bar is most of it
	Rows          []pause.Entry
	Lines         []vline
}

// A vline is a deadline drawn across the timeline.
type vline struct {
	Label  string
	At     time.Time
	Colour rgb
	Dash   bool
}

const (
	svgWidth   = 1000
	labelWidth = 110
	axisHeight = 28
	maxRowsPx  = 560
)

func newLayout(rep *drain.Report) layout {
	l := layout{Width: svgWidth, t0: rep.Budget.Start, left: labelWidth, right: svgWidth - 20}
	l.tEnd = latest(rep.Budget.Kill, rep.End, rep.Budget.Deadline)
	if !l.tEnd.After(l.t0) {
		l.tEnd = l.t0.Add(time.Second)
	}
	l.tEnd = l.tEnd.Add(l.tEnd.Sub(l.t0) / 50) // room right of SIGKILL for its label
	l.PhaseTop, l.PhaseHeight = 34, 26
	l.RowTop = l.PhaseTop + l.PhaseHeight + 12
	if rep.Preserve != nil {
		l.Rows = slices.Clone(rep.Preserve.Entries)
	}
	// Rows in the order the sandboxes started; the ones never started last.
	slices.SortStableFunc(l.Rows, func(a, b pause.Entry) int {
		switch {
		case a.Start.IsZero() != b.Start.IsZero():
			if a.Start.IsZero() {
				return 1
			}
			return -1
		}
		return a.Start.Compare(b.Start)
	})
	n := max(len(l.Rows), 1)
	l.RowHeight = min(12, max(1, float64(maxRowsPx)/float64(n)))
	l.Height = int(l.RowTop+float64(n)*l.RowHeight) + axisHeight + 24
	if ps := rep.PreStop; ps != nil && !ps.DrainDeadline.IsZero() {
		l.Lines = append(l.Lines, vline{"drain deadline", ps.DrainDeadline, deadlineColour, true})
	}
	if !rep.Budget.SIGTERM.IsZero() {
		l.Lines = append(l.Lines, vline{"SIGTERM", rep.Budget.SIGTERM, sigtermColour, true})
	}
	if p := rep.Phase(drain.PhasePreserve); p != nil {
		l.Lines = append(l.Lines, vline{"preserve deadline", p.Deadline, deadlineColour, false})
		if !p.Hard.IsZero() && !p.Hard.Equal(p.Deadline) {
			l.Lines = append(l.Lines, vline{"hard deadline", p.Hard, hardColour, false})
		}
	}
	l.Lines = append(l.Lines, vline{"budget deadline", rep.Budget.Deadline, hardColour, true})
	l.Lines = append(l.Lines, vline{"SIGKILL", rep.Budget.Kill, killColour, false})
	return l
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// X returns the pixel column of t, clamped to the axis.
func (l layout) X(t time.Time) float64 {
	span := l.tEnd.Sub(l.t0).Seconds()
	f := t.Sub(l.t0).Seconds() / span
	return l.left + min(max(f, 0), 1)*(l.right-l.left)
}

// RowY returns the top of row i's bar and its height.
func (l layout) RowY(i int) (y, h float64) {
	h = max(l.RowHeight*0.75, 1)
	return l.RowTop + float64(i)*l.RowHeight, h
}

// Bar returns the extent of row i's bar: from its start (the preserve
// phase's start for a sandbox never started) to its end.
func (l layout) Bar(i int, rep *drain.Report) (x0, x1 float64) {
	e := l.Rows[i]
	start, end := e.Start, e.End
	if start.IsZero() {
		if p := rep.Phase(drain.PhasePreserve); p != nil {
			start = p.Start
		}
		if end.IsZero() {
			end = start
		}
	}
	x0, x1 = l.X(start), l.X(end)
	return x0, max(x1, x0+1.5) // a bar is always visible
}

// writeSVG writes rep's timeline as a standalone SVG document.
func writeSVG(w io.Writer, rep *drain.Report) {
	l := newLayout(rep)
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		l.Width, l.Height, l.Width, l.Height)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	title := verdict(rep)
	p(`<text x="8" y="18" font-size="13" font-weight="bold">%s</text>`+"\n", html.EscapeString(title))

	// Legend, right of the title.
	lx := float64(l.Width) - 10
	for _, o := range []pause.Outcome{pause.Vanished, pause.NotStarted, pause.TimedOut, pause.Failed, pause.Preserved} {
		lx -= float64(7*len(o)) + 22
		p(`<rect x="%.1f" y="9" width="10" height="10" fill="%s"/><text x="%.1f" y="18" font-size="10">%s</text>`+"\n",
			lx, outcomeColour[o], lx+13, o)
	}

	// Phases.
	for i, ph := range rep.Phases {
		x0, x1 := l.X(ph.Start), l.X(ph.End)
		c := phaseColours[i%len(phaseColours)]
		p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="#607d8b" stroke-width="0.5"><title>%s</title></rect>`+"\n",
			x0, l.PhaseTop, max(x1-x0, 1), l.PhaseHeight, c, html.EscapeString(fmt.Sprintf("%s: %s, %s", ph.Name, ph.Result, secs(ph.Duration))))
		if x1-x0 > float64(7*len(ph.Name)) {
			p(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, l.PhaseTop+l.PhaseHeight/2+4, html.EscapeString(ph.Name))
		}
	}
	p(`<text x="8" y="%.1f">phases</text>`+"\n", l.PhaseTop+l.PhaseHeight/2+4)

	// Sandboxes.
	n := len(l.Rows)
	p(`<text x="8" y="%.1f">%d sandboxes</text>`+"\n", l.RowTop+10, n)
	p(`<text x="8" y="%.1f" fill="#555">by start</text>`+"\n", l.RowTop+24)
	for i, e := range l.Rows {
		y, h := l.RowY(i)
		x0, x1 := l.Bar(i, rep)
		c := outcomeColour[e.Outcome]
		tip := html.EscapeString(fmt.Sprintf("%s %s %s..%s %s", shownID(e.ID), e.Outcome, rel(e.Start, l.t0), rel(e.End, l.t0), oneLine(e.Error, 80)))
		if e.Outcome == pause.NotStarted {
			p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="%s" stroke-width="1"><title>%s</title></rect>`+"\n",
				x0, y, x1-x0, h, notStartedFill, c, tip)
			continue
		}
		p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n", x0, y, x1-x0, h, c, tip)
	}

	// Deadlines, labels staggered so that close lines stay readable.
	bottom := l.RowTop + float64(max(n, 1))*l.RowHeight
	for i, ln := range l.Lines {
		x := l.X(ln.At)
		dash := ""
		if ln.Dash {
			dash = ` stroke-dasharray="6,3"`
		}
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s><title>%s</title></line>`+"\n",
			x, l.PhaseTop-6, x, bottom, ln.Colour, dash, html.EscapeString(ln.Label+" "+rel(ln.At, l.t0)))
		anchor, dx := "end", -3.0
		if x < l.left+120 {
			anchor, dx = "start", 3
		}
		p(`<text x="%.1f" y="%.1f" fill="%s" text-anchor="%s" font-size="10">%s</text>`+"\n",
			x+dx, bottom+12+float64(i%2)*10, ln.Colour, anchor, html.EscapeString(ln.Label+" "+rel(ln.At, l.t0)))
	}

	// Time axis: a tick every whole step from T0.
	step := tickStep(l.tEnd.Sub(l.t0))
	ay := bottom + 26
	p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-width="1"/>`+"\n", l.left, ay, l.right, ay)
	for t := time.Duration(0); l.t0.Add(t).Before(l.tEnd); t += step {
		x := l.X(l.t0.Add(t))
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x, ay, x, ay+4)
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", x, ay+14, tickLabel(t))
		if t > math.MaxInt64-step { // the next tick would wrap round to before T0 (a 292-year grace)
			break
		}
	}
	p(`<text x="8" y="%.1f" font-size="10">from T0 (%s)</text>`+"\n", ay+14, html.EscapeString(string(rep.Budget.Anchor)))
	p("</svg>\n")
}

// tickStep is a 1-2-5 step giving at most a dozen ticks over span.
func tickStep(span time.Duration) time.Duration {
	for step := time.Millisecond; ; step *= 10 {
		for _, m := range []time.Duration{1, 2, 5} {
			if span/(step*m) <= 12 {
				return step * m
			}
		}
	}
}

func tickLabel(t time.Duration) string {
	switch {
	case t%time.Minute == 0 && t >= time.Minute:
		return fmt.Sprintf("%dm", int(t/time.Minute))
	case t%time.Second == 0:
		return fmt.Sprintf("%ds", int(t/time.Second))
	default:
		return fmt.Sprintf("%gs", t.Seconds())
	}
}
