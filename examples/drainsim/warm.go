package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/pause"
)

// warmStart is what a node that drained before starts its drain from: the drain before
// it on the same state directory, and what that drain learned.
type warmStart struct {
	// Before is the node's first drain, a sandboxd terminated as the shown one is, whose
	// sandboxes were drawn from IDSeed.
	Before *result
	IDSeed uint64
	// Seed is the shown drain's -id-seed: drainsim's, the seed server's.
	Seed uint64
	// Paused and Running are what the next sandboxd listed before its termination: the
	// first drain's preserved sandboxes, loaded as paused, and its own.
	Paused, Running int
	// Level is the level the first drain learned (learned-rates.json; 0: none, as when
	// too few sandboxes ran to compare two limits), Estimate the estimate of one pause
	// the next server starts from (the one the level was learned with, else the first
	// drain's), and Counted the pauses at once the next drain's plan counts on before
	// its Run measured any: the Limit of a Preserver started from them, as the server's
	// and drainkit plan's.
	Level    int
	Estimate time.Duration
	Counted  int
	Fixed    bool // -concurrency fixes the limit: no level is learned
	// Loaded is what the next sandboxd's log said it started from (its learned-rates
	// lines), so that the plan's level is the server's word, not only drainsim's reading
	// of the file.
	Loaded []string
}

// learnSeed is the -id-seed of a warm node's first drain: another sequence than the
// shown drain's, whose sandboxes are the seed's (opts.IDSeed). With the same seed the
// next server passes over the IDs the first drain's paused sandboxes hold and creates
// others, pausing in other times than the seed's.
func learnSeed(seed uint64) uint64 { return seed ^ 0x5bd1e9955bd1e995 | 1 }

// simulateWarm terminates drainkit's node twice on one state directory, as a DaemonSet's
// pods on one node follow each other: a first sandboxd with opts.N sandboxes drains and
// learns, then a new sandboxd on the directory gets opts.N running sandboxes (the seed's
// IDs) beside the first drain's paused ones, and is terminated the same way. The result
// is the second termination's, with the first in its Warm.
func simulateWarm(ctx context.Context, opts options, stderr io.Writer) (*result, error) {
	dir, err := os.MkdirTemp("", "drainsim-warm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ws := &warmStart{IDSeed: learnSeed(opts.IDSeed), Seed: opts.IDSeed, Fixed: opts.Concurrency > 0}
	first := opts
	first.IDSeed = ws.IDSeed
	nd, err := startNode(ctx, first, modeDrainkit, dir, opts.N, stderr)
	if err != nil {
		return nil, fmt.Errorf("first drain: %w", err)
	}
	ws.Before, err = terminate(ctx, first, modeDrainkit, nd)
	nd.close()
	if err != nil {
		return nil, fmt.Errorf("first drain: %w", err)
	}
	if err := ws.readRates(dir); err != nil {
		return nil, err
	}

	if nd, err = startNode(ctx, opts, modeDrainkit, dir, opts.N, stderr); err != nil {
		return nil, fmt.Errorf("second drain: %w", err)
	}
	defer nd.close()
	if ws.Paused, ws.Running, err = countStates(ctx, &http.Client{Timeout: 10 * time.Second}, nd.base); err != nil {
		return nil, fmt.Errorf("second drain: %w", err)
	}
	ws.Loaded = nd.tail.startLines()
	res, err := terminate(ctx, opts, modeDrainkit, nd)
	if err != nil {
		return nil, fmt.Errorf("second drain: %w", err)
	}
	res.Warm = ws
	res.Mode = modeDrainkit + ", drained before"
	return res, nil
}

// readRates reads what the first drain left in dir for the next server: the level and
// its estimate, and the pauses at once a plan counts on from them.
func (ws *warmStart) readRates(dir string) error {
	r, err := learned.Read(filepath.Join(dir, learned.File))
	if err != nil {
		return fmt.Errorf("first drain left no learned rates for the next: %w", err)
	}
	var levelEst time.Duration
	ws.Level, levelEst = r.Level()
	ws.Estimate = r.Estimate
	cfg := pause.Config{MaxLimit: r.MaxLimit} // a fixed -concurrency writes none: the limit is the flag's
	if r.MaxLimit == 0 {
		cfg = pause.Config{Limit: r.Limit}
	} else if ws.Level > 0 {
		cfg.Limit = min(ws.Level, r.MaxLimit)
		ws.Estimate = levelEst // what the adaptive start's Estimator starts from (learned.Start)
	}
	p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }), cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", learned.File, err)
	}
	ws.Counted = p.Limit()
	return nil
}

// startedCold reports whether the server's log says it set what was learned aside (or
// had none): its plan then counted on no level, whatever the file holds.
func (ws *warmStart) startedCold() bool {
	for _, l := range ws.Loaded {
		if strings.Contains(l, "starting cold") {
			return true
		}
	}
	return len(ws.Loaded) == 0
}

// loadedLevel is the learned_concurrency the server's log says it loaded, 0 if none.
func (ws *warmStart) loadedLevel() int {
	for _, l := range ws.Loaded {
		if v, ok := logValue(l, "learned_concurrency"); ok && strings.Contains(l, "learned rates loaded") {
			var n int
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	return 0
}

// logValue returns the value of key in one of slog's text lines.
func logValue(line, key string) (string, bool) {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// printWarm says what the shown drain started from: the first drain, what it learned and
// what the next server loaded, and what the plan counts on.
func printWarm(w io.Writer, ws *warmStart) {
	b := ws.Before
	fmt.Fprintf(w, "  first drain of the node (a sandboxd of its own, -id-seed %d; not in the table):\n", ws.IDSeed)
	fmt.Fprintf(w, "    %d/%d preserved, preStop wait %s, %s\n", b.Preserved, b.N,
		seconds(b.Timeline.HookEnd.Sub(b.Timeline.Start)), exitWords(b))
	why := "too few sandboxes to compare two limits"
	if ws.Fixed {
		why = "-concurrency fixes the limit"
	}
	learnt := fmt.Sprintf("no level learned (%s), a pause estimated at %s", why, seconds(ws.Estimate))
	if ws.Level > 0 {
		learnt = fmt.Sprintf("learned level %d, a pause estimated at %s at that level", ws.Level, seconds(ws.Estimate))
	}
	fmt.Fprintf(w, "    %s: %s\n", learned.File, learnt)
	fmt.Fprintf(w, "  then a new sandboxd on the same state directory (a DaemonSet's next pod on the node):\n")
	fmt.Fprintf(w, "    %d paused sandboxes loaded from the first drain (not counted below), %d new running (-id-seed %d, the seed's)\n",
		ws.Paused, ws.Running, ws.Seed)
	switch {
	case ws.startedCold():
		fmt.Fprintf(w, "    it started cold (its log: %s): its plan counts on one pause at a time\n", strings.Join(ws.Loaded, "; "))
	default:
		counts := fmt.Sprintf("%d pauses at once", ws.Counted)
		switch {
		case ws.Counted == 1:
			counts = "one pause at a time"
		case ws.Counted < ws.Level: // pause.Preserver.Limit: a level above the start is the first round's to test
			counts += " (the adaptive limit's start: the level above it is tested by the first round)"
		}
		fmt.Fprintf(w, "    it loaded them (its log: learned_concurrency=%d); its plan counts on %s, a pause estimated at %s\n",
			ws.loadedLevel(), counts, seconds(ws.Estimate))
	}
	fmt.Fprintf(w, "  the second drain, which the table shows:\n")
}

// exitWords says how a termination's server ended.
func exitWords(r *result) string {
	switch {
	case r.Timeline.Killed:
		return "SIGKILLed"
	case r.ExitErr != nil:
		return "exited by itself, " + r.ExitErr.Error()
	}
	return fmt.Sprintf("exited %s before SIGKILL", seconds(r.Timeline.Headroom()))
}
