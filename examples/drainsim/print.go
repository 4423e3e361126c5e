package main

import (
	"fmt"
	"github.com/drainkit/drainkit/drain"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// event is one line of a printed timeline.
type event struct {
	at   time.Time
	what string
}

// printTimeline prints the kubelet's events merged with what the server did: the pauses
// that reached disk and, for drainkit, the phases of its Report.
func printTimeline(w io.Writer, r *result) {
	tl := r.Timeline
	var evs []event
	for _, e := range tl.Events {
		evs = append(evs, event{e.At, "kubelet: " + e.What})
	}
	for i, at := range r.PausedAt {
		if i == 0 || i == len(r.PausedAt)-1 || len(r.PausedAt) <= 6 {
			evs = append(evs, event{at, fmt.Sprintf("server:  sandbox paused and recorded (%d/%d)", i+1, r.N)})
		}
	}
	if r.Report != nil {
		for _, p := range r.Report.Phases {
			evs = append(evs, event{p.End, "server:  " + describePhase(p)})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	for _, e := range evs {
		fmt.Fprintf(w, "  %8s  %s\n", seconds(e.at.Sub(tl.Start)), e.what)
	}
}

// printTable prints the side-by-side comparison.
func printTable(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	row := func(name string, f func(*result) string) {
		cells := []string{name}
		for _, r := range results {
			cells = append(cells, f(r))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	row("", func(r *result) string { return r.Mode })
	row("preStop hook", func(r *result) string {
		d := seconds(r.Timeline.HookEnd.Sub(r.Timeline.Start))
		if r.Timeline.HookKept {
			return d + ", cut off at the grace period"
		}
		return d + ", returned"
	})
	row("SIGTERM to SIGKILL", func(r *result) string { return seconds(r.Timeline.Remaining) })
	row("sandboxes preserved", func(r *result) string { return fmt.Sprintf("%d/%d", r.Preserved, r.N) })
	row("sandboxes lost", func(r *result) string { return fmt.Sprint(r.N - r.Preserved) })
	row("device daemon", func(r *result) string {
		if r.DaemonClean {
			return "stopped cleanly"
		}
		return "SIGKILLed, devices live"
	})
	row("server", func(r *result) string {
		switch {
		case r.Timeline.Killed:
			return "SIGKILLed"
		case r.ExitErr != nil:
			return "exited by itself, " + r.ExitErr.Error()
		}
		return "exited by itself"
	})
	row("headroom left at exit", func(r *result) string {
		if r.Timeline.Killed {
			return "none (killed)"
		}
		return seconds(r.Timeline.Headroom())
	})
	tw.Flush()
}

func seconds(d time.Duration) string {
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// describePhase says in words how one phase of drainkit's Report ended.
func describePhase(p drain.PhaseReport) string {
	how := map[drain.Result]string{drain.OK: "done", drain.Failed: "FAILED", drain.TimedOut: "ended at its deadline",
		drain.Abandoned: "ABANDONED at its deadline"}[p.Result]
	what := map[string]string{
		drain.PhaseDrain:    "drain (preStop wait for running sandboxes)",
		drain.PhaseGate:     "gate (in-flight creates finished)",
		drain.PhasePreserve: "preserve (pause every running sandbox)",
		"ublk":              "ublk (devices stopped, daemon exited)",
		"http":              "http (server shut down)",
	}[p.Name]
	if what == "" {
		what = p.Name
	}
	return fmt.Sprintf("%s: %s, %v", what, how, p.Duration.Round(time.Millisecond))
}
