package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/pause"
)

// The reports in testdata were written by real drains of sandboxd (fake
// runtime): sandboxd-lost4 ran 60 sandboxes into an 8 s grace period and
// lost four in flight at the preserve deadline; sandboxd-clean preserved
// all twelve; sandboxd-late-sigterm got its SIGTERM four seconds after the
// expected SIGKILL, so only the kubelet's 2 s minimum was left;
// supervisor-clean is sandboxd-clean inside a supervisor report;
// supervisor-resumed and supervisor-resumed-lost are the supervisor in
// front of the AgentENV double (examples/supervisor's resume e2e tests),
// whose users resumed 8 of 16 sandboxes after the preserve phase's last
// listing: the final sweep paused them again, or (6 s grace, 2.5 s
// pauses) could not in time.
func TestReportSummaryGolden(t *testing.T) {
	for _, tc := range []struct {
		file string
		code int
	}{
		{"sandboxd-lost4.json", exitNoFit},
		{"sandboxd-clean.json", exitOK},
		{"sandboxd-late-sigterm.json", exitNoFit},
		{"supervisor-clean.json", exitOK},
		{"supervisor-resumed.json", exitOK},
		{"supervisor-resumed-lost.json", exitNoFit},
	} {
		t.Run(tc.file, func(t *testing.T) {
			code, out, errw := drainkit(t, "report", filepath.Join("testdata", tc.file))
			assert.Equal(t, tc.code, code, errw)
			assert.Empty(t, errw)
			golden(t, strings.TrimSuffix(tc.file, ".json")+".golden", out)
		})
	}
}

func TestReportSummarySaysWhatWasLost(t *testing.T) {
	_, out, _ := drainkit(t, "report", "testdata/sandboxd-lost4.json")
	assert.Contains(t, out, "4 of 60 sandboxes LOST")
	assert.Contains(t, out, "Lost (4)")
	assert.Contains(t, out, "context deadline exceeded")
	_, out, _ = drainkit(t, "report", "-lost", "6", "testdata/sandboxd-late-sigterm.json")
	assert.Contains(t, out, "36 of 40 sandboxes LOST")
	assert.Contains(t, out, "never started")
	assert.Contains(t, out, "... and 30 more (-lost 0 lists all)")
}

// Fault: the report of a drain whose sandboxes ran again after their
// preserve (pause.Entry.Relisted: a user resumed them behind the
// supervisor) said nothing of it: 16 preserved read as 16 paused once, and
// 8 lost read as 8 pauses cut at the preserve deadline, not 8 sandboxes
// paused, resumed, and then lost by the final sweep.
func TestReportSaysWhichSandboxesRanAgainAfterTheirPreserve(t *testing.T) {
	code, out, _ := drainkit(t, "report", "testdata/supervisor-resumed.json")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "all 16 sandboxes preserved")
	assert.Contains(t, out, "8 relisted: ran again after their preserve (resumed, or listed late); preserving them again: 8 preserved, none lost")

	code, out, _ = drainkit(t, "report", "testdata/supervisor-resumed-lost.json")
	assert.Equal(t, exitNoFit, code)
	assert.Contains(t, out, "8 of 16 sandboxes LOST (8 ran again after their preserve)")
	assert.Contains(t, out, "preserving them again: 0 preserved, 8 LOST")
	assert.Regexp(t, `i0000016  timed_out  preserved, ran again \(relisted 1\), then \+2\.531s\.\.\+4\.008s, 2 attempt\(s\)`, out)
}

func TestReportOfSupervisorReadsItsDrain(t *testing.T) {
	_, sup, _ := drainkit(t, "report", "testdata/supervisor-clean.json")
	_, plain, _ := drainkit(t, "report", "testdata/sandboxd-clean.json")
	assert.Equal(t, plain, sup)
}

func TestReportBadInputNamesTheProblem(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{`not json`, "not a JSON object"},
		{`{"start": "2026-01-01T00:00:00Z"}`, `neither a drain Report (no "phases") nor a supervisor report`},
		{`{"server": {"pid": 1}, "exit_code": 0}`, "a supervisor report without a drain"},
		{`{"phases": []}`, "no budget start (T0)"},
		// Fault (a review of the CLI): a Report with a T0 and no phase
		// printed a blank summary and exited 0, "went as planned".
		{`{"phases": [], "budget": {"start": "2026-01-01T00:00:00Z"}}`, "no phase"},
		{`{"phases": 3}`, "cannot unmarshal"},
	} {
		f := filepath.Join(dir, "r.json")
		require.NoError(t, os.WriteFile(f, []byte(tc.body), 0o644))
		code, _, errw := drainkit(t, "report", f)
		assert.Equal(t, exitUsage, code, tc.body)
		assert.Contains(t, errw, tc.want, tc.body)
		assert.Contains(t, errw, f, "the error names the file")
	}
	code, _, errw := drainkit(t, "report", filepath.Join(dir, "missing.json"))
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errw, "no such file")
	code, _, errw = drainkit(t, "report")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errw, "want one FILE")
	code, _, errw = drainkit(t, "report", "-lost", "-1", "x.json")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errw, "-lost must not be negative")
}

func TestReportWritesSVG(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.svg")
	code, _, errw := drainkit(t, "report", "testdata/sandboxd-lost4.json", "-svg", out)
	assert.Equal(t, exitNoFit, code, errw)
	svg, err := os.ReadFile(out)
	require.NoError(t, err)
	s := string(svg)
	assert.True(t, strings.HasPrefix(s, `<svg xmlns="http://www.w3.org/2000/svg"`))
	assert.Equal(t, 60, strings.Count(s, "<title>sb-"), "one bar per sandbox")
	for _, label := range []string{"drain deadline", "preserve deadline", "budget deadline", "SIGKILL"} {
		assert.Contains(t, s, ">"+label+" +", label)
	}
	code, _, errw = drainkit(t, "report", "-svg", filepath.Join(t.TempDir(), "no", "dir.svg"), "testdata/sandboxd-clean.json")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errw, "-svg:")
	// Fault (an operator's review): an SVG that could not be written made
	// a drain that lost sandboxes exit 2, and a script lost the 1 it reads.
	code, _, errw = drainkit(t, "report", "-svg", filepath.Join(t.TempDir(), "no", "dir.svg"), "testdata/sandboxd-lost4.json")
	assert.Equal(t, exitNoFit, code, "the loss, not the picture")
	assert.Contains(t, errw, "-svg:")
}

// hungPreserver's Run ignores its deadline until release is closed.
type hungPreserver struct{ release chan struct{} }

func (h hungPreserver) Run(context.Context, time.Time) *pause.Report {
	<-h.release
	return &pause.Report{}
}
func (hungPreserver) Limit() int                     { return 1 }
func (hungPreserver) Estimator() *deadline.Estimator { return nil }

// Fault (a fresh-eyes review): a Preserver that did not return by its hard
// deadline leaves the Report without the Preserver's account. The summary
// said "no preserve phase ran" and its verdict, the line an operator reads
// first, named no failure ("finished 4.900s before SIGKILL") while the exit
// status was 1 and what became of the sandboxes is unknown.
//
//	0 s    SIGTERM, no preStop; the Preserver hangs
//	55.1 s abandoned at the budget's deadline (60 s - 5 s margin) and the slack
//	55.1 s the Report: preserve abandoned, no account of the sandboxes
func TestReportOfAnAbandonedPreserverSaysSo(t *testing.T) {
	_, code, out, verdict := reportOfAnAbandonedPreserver(t, 0)
	assert.Equal(t, exitNoFit, code)
	assert.Contains(t, verdict, "sandboxes UNKNOWN (the preserve phase was abandoned", "the verdict line says it")
	assert.NotContains(t, out, "no preserve phase ran")
	assert.Contains(t, out, "Sandboxes    UNKNOWN: the preserve phase was abandoned: the Preserver did not return by the hard deadline")
}

// Fault: the same abandoned Preserver on a node where the drain's count
// saw three sandboxes running. The Report's Lost said 0 (the JSON carried
// nothing of the three), so the summary could not say how many the drain
// left unaccounted for. It says so in the verdict and the Sandboxes line.
func TestReportOfAnAbandonedPreserverCountsTheSandboxes(t *testing.T) {
	rep, code, out, verdict := reportOfAnAbandonedPreserver(t, 3)
	require.Equal(t, 3, rep.Lost())
	assert.Equal(t, exitNoFit, code)
	assert.Contains(t, verdict, "3 sandboxes UNKNOWN (the preserve phase was abandoned)", "the verdict line counts them")
	assert.Contains(t, out, "Sandboxes    UNKNOWN: 3 the drain counted running, none accounted for: the preserve phase was abandoned")
}

// reportOfAnAbandonedPreserver runs `drainkit report` on the Report of a drain (grace
// 60 s, margin 5 s, no preStop) whose Preserver hangs past its hard deadline, on a node
// with running sandboxes (0: the drain has no Sandboxes to count). It returns the Report,
// and the report command's exit code, output and verdict line.
func reportOfAnAbandonedPreserver(t *testing.T, running int) (rep *drain.Report, code int, out, verdict string) {
	t.Helper()
	var data []byte
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		b, err := deadline.New(60*time.Second, deadline.Config{Margin: 5 * time.Second})
		require.NoError(t, err)
		cfg := drain.Config{Budget: b, Preserver: hungPreserver{release}}
		if running > 0 {
			node := draintest.NewNode()
			node.AddN("sb", running, time.Second)
			cfg.Sandboxes = node
		}
		d, err := drain.New(cfg)
		require.NoError(t, err)
		rep = d.Shutdown(context.Background())
		close(release)
		require.Equal(t, drain.Abandoned, rep.Phase(drain.PhasePreserve).Result)
		data, err = json.Marshal(rep)
		require.NoError(t, err)
	})
	f := filepath.Join(t.TempDir(), "last-shutdown.json")
	require.NoError(t, os.WriteFile(f, data, 0o644))

	code, out, _ = drainkit(t, "report", f)
	verdict, _, _ = strings.Cut(strings.SplitN(out, "Verdict", 2)[1], "\n")
	return rep, code, out, verdict
}

// capped is an io.Writer that panics past max bytes: an SVG that never
// ends fails the test instead of filling the memory.
type capped struct{ n, max int }

func (c *capped) Write(p []byte) (int, error) {
	if c.n += len(p); c.n > c.max {
		panic(fmt.Sprintf("the SVG passed %d bytes", c.max))
	}
	return len(p), nil
}

// Fault (a fresh-eyes review): the time axis of a drain with the largest
// grace the library takes (drain.Server's DRAINKIT_GRACE=9223372036, 292
// years) never ended: its tick step of 10^18 ns, added past the largest
// Duration, wrapped round to a negative offset that was always before the
// end, and -svg wrote ticks until the memory ran out.
func TestReportSVGOfTheLargestGraceEnds(t *testing.T) {
	var rep *drain.Report
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(9223372036*time.Second, deadline.Config{})
		require.NoError(t, err)
		d, err := drain.New(drain.Config{Budget: b,
			Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })})
		require.NoError(t, err)
		rep = d.Shutdown(context.Background())
	})
	w := &capped{max: 1 << 20}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("the time axis did not end: %v", p)
			}
		}()
		writeSVG(w, rep)
	}()
	assert.Less(t, w.n, 20000, "an empty drain's timeline is a few kB")
}

// An adaptive drain that compared two levels says which it learned best
// (pause.Report.LearnedLimit: where the node's next drain may start)
// beside the limit at the end, which may be a probe; a drain that learned
// none (Example_report, a fixed limit) says only the limit at the end.
func TestReportSaysTheLearnedLimit(t *testing.T) {
	path := edited(t, "sandboxd-clean.json", func(rep *map[string]any) {
		(*rep)["preserve"].(map[string]any)["learned_limit"] = 16
	})
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, exitOK, code, errw)
	assert.Contains(t, out, "Sandboxes    12 listed in 2 pass(es), concurrency limit 4 at the end, 16 learned best\n")
}

// Fault (a fresh-eyes review): a sandbox's ID and its error are the
// server's words (a listed ID, the start of a failed pause's answer body,
// pause/httpsource), written into the Report as they came. A control
// character in either went into the summary as it was (an escape sequence
// that clears the operator's terminal, a tab that breaks the columns) and
// into the SVG, where XML allows none: the browser showed a parse error
// instead of the whole timeline. Both now show such characters escaped.
func TestReportEscapesControlCharactersInIDsAndErrors(t *testing.T) {
	const id, body = "sb-\x1b[2J\tx\x00", "httpsource: pause: 500 Internal Server Error: \x1b]0;title\a\x7f<b>"
	path := edited(t, "sandboxd-lost4.json", func(rep *drain.Report) {
		n := 0
		for i, e := range rep.Preserve.Entries {
			if e.Outcome.Lost() && n < 2 {
				if n == 0 {
					rep.Preserve.Entries[i].ID = id
				} else {
					rep.Preserve.Entries[i].Error = body
				}
				n++
			}
		}
		require.Equal(t, 2, n)
	})
	svgPath := filepath.Join(t.TempDir(), "t.svg")

	code, out, errw := drainkit(t, "report", "-svg", svgPath, path)
	require.Equal(t, exitNoFit, code, errw)
	for _, c := range out {
		assert.False(t, c < ' ' && c != '\n' || c == 0x7f, "the summary holds the control character %q", c)
	}
	assert.Contains(t, out, `sb-\x1b[2J\tx\x00  `, "the ID, escaped, in its column")
	assert.Contains(t, out, `500 Internal Server Error: \x1b]0;title\a\x7f<b>`)

	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "the SVG is not well-formed XML: a browser shows an error instead of the timeline")
	}
	assert.Contains(t, string(svg), `<title>sb-\x1b[2J\tx\x00 timed_out`)
	assert.Contains(t, string(svg), `Error: \x1b]0;title\a\x7f&lt;b&gt;`)
}

// A drain that preserved every sandbox but whose device step failed (the
// daemon killed with a device still live, the host-crash path) is a fault:
// the exit status is 1 and the summary names the step and its error, as
// Report.Err does. The help said 1 only for lost sandboxes and a drain
// after SIGKILL, and a script reading it took such a drain for a clean one.
func TestReportOfAFailedStepExitsOneAndNamesIt(t *testing.T) {
	path := edited(t, "sandboxd-clean.json", func(doc *map[string]any) {
		failed := false
		for _, p := range (*doc)["phases"].([]any) {
			if ph := p.(map[string]any); ph["name"] == "ublk" {
				ph["result"], ph["error"] = "failed", "ublk: device 1: the daemon was killed with the device live"
				failed = true
			}
		}
		require.True(t, failed, "the clean report has a ublk step")
	})

	code, out, errw := drainkit(t, "report", path)
	assert.Equal(t, exitNoFit, code, errw)
	assert.Contains(t, out, "the daemon was killed with the device live")
	_, help, _ := drainkit(t, "report", "-h")
	assert.Contains(t, strings.Join(strings.Fields(help), " "), "1 when not: a sandbox lost, a teardown step that failed")
}

// A sandbox the server listed without an ID (row 220) is in the Report as
// a failed entry with the ID "": the summary's lost list showed it with an
// empty first column, the line reading as a sandbox whose ID was lost by
// the report, and the timeline's tooltip began with its outcome. Both now
// say "(no ID)".
func TestReportNamesASandboxListedWithoutAnID(t *testing.T) {
	path := edited(t, "sandboxd-lost4.json", func(rep *drain.Report) {
		i := slices.IndexFunc(rep.Preserve.Entries, func(e pause.Entry) bool { return e.Outcome.Lost() })
		require.GreaterOrEqual(t, i, 0)
		rep.Preserve.Entries[i].ID = ""
		rep.Preserve.Counts[rep.Preserve.Entries[i].Outcome]-- // the counts stay the entries' (checkPreserve)
		rep.Preserve.Counts[pause.Failed]++
		rep.Preserve.Entries[i].Outcome = pause.Failed
		rep.Preserve.Entries[i].Error = "pause: listing 1, element 3: empty ID; not preserved"
	})
	svgPath := filepath.Join(t.TempDir(), "t.svg")

	code, out, errw := drainkit(t, "report", "-svg", svgPath, path)
	require.Equal(t, exitNoFit, code, errw)
	assert.Regexp(t, `\n  \(no ID\) +failed `, out)
	svg, err := os.ReadFile(svgPath)
	require.NoError(t, err)
	assert.Contains(t, string(svg), "<title>(no ID) failed")
}

// edited writes testdata/file, decoded as a T (a drain.Report, or a generic
// map for fields a Report does not expose), changed by edit, to a file of
// the test's own and returns its path.
func edited[T any](t *testing.T, file string, edit func(*T)) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	require.NoError(t, err)
	var doc T
	require.NoError(t, json.Unmarshal(data, &doc))
	edit(&doc)
	data, err = json.Marshal(doc)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), file)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// A drain whose budget followed the kubelet's run over (docs/faults.md row
// 228) says so: SIGKILL is then later than T0 + the grace in use, and the
// summary names when the new run started and with what grace.
func TestReportNamesTheKubeletsRunOver(t *testing.T) {
	path := edited(t, "sandboxd-clean.json", func(rep *drain.Report) {
		rep.Budget.Restart = rep.Budget.Start.Add(600 * time.Second)
		rep.Budget.RestartGrace = 900 * time.Second
	})
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, 0, code, errw)
	assert.Contains(t, out, "the kubelet ran the termination over at +600.000s with grace 15m0s (the hook ran again)")
}

// The summary says what began the drain and which signals came while it
// ran, when the Report knows (reports written before it did stay as
// they were: the goldens).
func TestReportNamesWhatBeganTheDrain(t *testing.T) {
	path := edited(t, "sandboxd-clean.json", func(rep *drain.Report) {
		rep.Cause = "SIGTERM"
		rep.Signals = []drain.ReceivedSignal{
			{Name: "SIGTERM", At: rep.Budget.SIGTERM},
			{Name: "SIGTERM", At: rep.Budget.Start.Add(3 * time.Second)},
			{Name: "SIGINT", At: rep.Budget.Start.Add(4500 * time.Millisecond)},
		}
	})
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, 0, code, errw)
	assert.Contains(t, out, "Began by     SIGTERM; then SIGTERM at +3.000s (the kubelet's again: not forcing), SIGINT at +4.500s (forces)\n")

	path = edited(t, "sandboxd-clean.json", func(rep *drain.Report) { rep.Cause = "the server stopped serving on its own" })
	_, out, _ = drainkit(t, "report", path)
	assert.Contains(t, out, "Began by     the server stopped serving on its own\n")
}

// Fault (an operator's review): a hand-edited or damaged Report whose
// sandboxes disagree with its counts was rendered as if whole: the
// entries dropped read "4 of 0 sandboxes LOST" beside a table of 56
// preserved, and an outcome no drain writes ("exploded") was listed
// under Lost (5) while the verdict said 4, exit 1 either way. The report
// is now refused, exit 2, with what disagrees named.
func TestReportThatContradictsItselfIsRefused(t *testing.T) {
	orig, err := os.ReadFile("testdata/sandboxd-lost4.json")
	require.NoError(t, err)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		edit func(pr map[string]any)
		want string
	}{
		{"entries dropped", func(pr map[string]any) { delete(pr, "entries") },
			`the preserve account's counts (60 sandboxes: preserved 56, timed_out 4) disagree with its 0 entries (none)`},
		{"unknown outcome", func(pr map[string]any) {
			pr["entries"].([]any)[0].(map[string]any)["outcome"] = "exploded"
		}, `sandbox sb-002af7a0ec95 has the outcome "exploded", which no drain writes (preserved, failed, timed_out, not_started, vanished)`},
		{"count edited", func(pr map[string]any) { pr["counts"].(map[string]any)["preserved"] = 60 },
			`the preserve account's counts (64 sandboxes: preserved 60, timed_out 4) disagree with its 60 entries (preserved 56, timed_out 4)`},
	} {
		var rep map[string]any
		require.NoError(t, json.Unmarshal(orig, &rep))
		tc.edit(rep["preserve"].(map[string]any))
		data, err := json.Marshal(rep)
		require.NoError(t, err)
		f := filepath.Join(dir, "r.json")
		require.NoError(t, os.WriteFile(f, data, 0o644))
		code, out, errw := drainkit(t, "report", f)
		assert.Equal(t, exitUsage, code, tc.name)
		assert.Empty(t, out, tc.name)
		assert.Contains(t, errw, f+": "+tc.want, tc.name)
	}
}

// Fault (a review of the CLI): a Report without headroom_ns (written by
// hand, or cut) read as ending 0 s before SIGKILL: "finished - before
// SIGKILL", and one that ended after SIGKILL exited 0. The headroom is the
// expected SIGKILL less the end, as drain computes it; one the Report gives
// is kept, and so is the rule inside a supervisor's report.
func TestReportWithoutHeadroomComputesIt(t *testing.T) {
	for name, tc := range map[string]struct {
		end, extra string
		supervisor bool
		want       string
		code       int
	}{
		"ended before SIGKILL":         {end: "2026-01-01T00:00:27Z", want: "finished 3.000s before SIGKILL"},
		"ended after SIGKILL":          {end: "2026-01-01T00:00:31Z", want: "finished 1.000s AFTER the expected SIGKILL", code: 1},
		"in a supervisor's report":     {end: "2026-01-01T00:00:31Z", supervisor: true, want: "finished 1.000s AFTER the expected SIGKILL", code: 1},
		"headroom given is kept":       {end: "2026-01-01T00:00:27Z", extra: `"headroom_ns": 5000000000,`, want: "finished 5.000s before SIGKILL"},
		"headroom given after SIGKILL": {end: "2026-01-01T00:00:27Z", extra: `"headroom_ns": -2000000000,`, want: "finished 2.000s AFTER the expected SIGKILL", code: 1},
	} {
		t.Run(name, func(t *testing.T) {
			rep := `{"start": "2026-01-01T00:00:00Z", "end": "` + tc.end + `", ` + tc.extra + `
				"budget": {"start": "2026-01-01T00:00:00Z", "kill": "2026-01-01T00:00:30Z"},
				"phases": [{"name": "preserve", "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:00:01Z", "result": "ok"}]}`
			if tc.supervisor {
				rep = `{"server": {"pid": 7}, "drain": ` + rep + `}`
			}
			f := filepath.Join(t.TempDir(), "r.json")
			require.NoError(t, os.WriteFile(f, []byte(rep), 0o600))
			var stdout, stderr bytes.Buffer
			code := runReport(context.Background(), []string{f}, &stdout, &stderr)
			assert.Contains(t, stdout.String(), tc.want, stderr.String())
			assert.Equal(t, tc.code, code)
		})
	}
}

// A preserve account whose listings all failed after their first page
// (pause.Report.Incomplete) says so in the verdict and by the counts: the
// verdict read "all N sandboxes preserved", and the error only as the
// "last listing error", for a node whose page 2 was never listed.
func TestReportOfAnIncompleteListingSaysSo(t *testing.T) {
	path := edited(t, "sandboxd-clean.json", func(rep *drain.Report) {
		rep.Preserve.Incomplete, rep.Preserve.ListErr = true, "page 2: 503 Service Unavailable"
	})
	_, out, errw := drainkit(t, "report", path)
	require.Empty(t, errw)
	assert.Contains(t, out, "\nVerdict      all 12 listed sandboxes preserved; listing INCOMPLETE (sandboxes not listed may have run); finished")
	assert.Contains(t, out, "INCOMPLETE: no listing was complete, sandboxes not listed may have run: page 2: 503 Service Unavailable")
	assert.NotContains(t, out, "last listing error")
}

// Fault (row 1510): a drain SIGKILLed in its middle left no account of its own; the
// servers now keep one from its start, marked "unfinished", and report says plainly
// that the drain did not finish, with what was known when it was last written, and
// exits 1. testdata/sandboxd-unfinished.json is sandboxd's file after a real SIGKILL
// in its preserve phase (examples/sandboxd's
// TestSIGKILLMidDrainLeavesThisDrainsUnfinishedReport): 8 sandboxes, the gate ended.
func TestReportOfAnUnfinishedDrainSaysItDidNotFinish(t *testing.T) {
	code, out, errw := drainkit(t, "report", filepath.Join("testdata", "sandboxd-unfinished.json"))
	require.Equal(t, 1, code, "%s%s", out, errw)
	assert.Contains(t, out, "Verdict      UNFINISHED: no final Report: the process ended before it (a SIGKILL, a crash) or could not write it\n"+
		"             (its file system full or read-only: its log and termination message say);\n")
	assert.Contains(t, out, "the preserve phase running, 8 sandboxes counted running")
	assert.Contains(t, out, "Planned      then: preserve by +")
	assert.Contains(t, out, "  gate ")
	assert.Contains(t, out, "Sandboxes    NOT KNOWN: the preserve phase had not ended; the drain counted 8 running")

	// Cut before its first phase ended: no phase, which a finished Report always has.
	path := edited(t, "sandboxd-unfinished.json", func(doc *map[string]any) { (*doc)["phases"] = nil })
	code, out, errw = drainkit(t, "report", path)
	require.Equal(t, 1, code, "%s%s", out, errw)
	assert.Contains(t, out, "UNFINISHED")
}

// The supervisor keeps its drain's account in its -report's "drain" member while the
// drain runs (row 1513): report reads it there, UNFINISHED, exit 1.
func TestReportOfTheSupervisorsUnfinishedDrainSaysItDidNotFinish(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "sandboxd-unfinished.json"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "report.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"drain": `+string(data)+`}`), 0o600))
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, 1, code, "%s%s", out, errw)
	assert.Contains(t, out, "Verdict      UNFINISHED: no final Report")
}

// Fault (row 1800): what the drain's reads of the pod found (drain.Report's
// PodMismatch, StaticPod, PodUIDUnknown) was nowhere in the summary. A
// POD_UID that is not the pod's fails Report.Err, so report exited 1 under a
// verdict of "all 12 sandboxes preserved; finished 2.858s before SIGKILL",
// naming nothing wrong; and a static pod, whose budget stood on the grace
// because the API server shows no deletion of it, read as any pod.
func TestReportSaysWhatTheReadsOfThePodFound(t *testing.T) {
	const mismatch = `kube: pod sandboxd/sandboxd-0: kube: another pod under the name (uid "uid-1", want "uid-typo")`
	path := edited(t, "sandboxd-clean.json", func(rep *drain.Report) { rep.PodMismatch = mismatch })
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, exitNoFit, code, errw)
	assert.Contains(t, out, "\nVerdict      all 12 sandboxes preserved; finished 2.858s before SIGKILL; POD MISNAMED (no deletion of this pod could be read)\n")
	assert.Contains(t, out, "\nPod          MISNAMED: POD_NAME or POD_UID is not this pod's, so no deletion of it could be read: "+mismatch+"\n")

	path = edited(t, "sandboxd-clean.json", func(rep *drain.Report) { rep.StaticPod, rep.PodUIDUnknown = true, true })
	code, out, errw = drainkit(t, "report", path)
	require.Equal(t, exitOK, code, errw)
	assert.Contains(t, out, "\nVerdict      all 12 sandboxes preserved; finished 2.858s before SIGKILL\n")
	assert.Contains(t, out, "\nPod          a static pod: the API server shows no deletion of it (the kubelet stops it when its manifest is removed, with its grace from SIGTERM): no deletion of its mirror pod was taken for its own\n")
	assert.Contains(t, out, "\n             its UID never known (no POD_UID, no read found the pod): a pod gone from the API server could not be told from a name it never had\n")

	// The account of an unfinished drain carries them too (row 1610).
	path = edited(t, "sandboxd-unfinished.json", func(doc *map[string]any) { (*doc)["static_pod"] = true })
	code, out, errw = drainkit(t, "report", path)
	require.Equal(t, exitNoFit, code, errw)
	assert.Contains(t, out, "\nPod          a static pod: ")
}

// Fault (row 1803): a phase whose result no drain writes (a later version's, a
// damaged or hand-edited file: "degraded", "fialed", or none) was read as one that
// went well: drain.Report.Err faults only the results it knows, so report exited 0,
// "all 12 sandboxes preserved", for a ublk step that said it had not. It is refused,
// exit 2, naming the phase and the results a drain writes, as an outcome no drain
// writes is (row 285).
func TestReportOfAPhaseResultNoDrainWritesIsRefused(t *testing.T) {
	for _, result := range []string{"degraded", ""} {
		path := edited(t, "sandboxd-clean.json", func(doc *map[string]any) {
			for _, p := range (*doc)["phases"].([]any) {
				if ph := p.(map[string]any); ph["name"] == "ublk" {
					ph["result"] = result
				}
			}
		})
		code, out, errw := drainkit(t, "report", path)
		assert.Equal(t, exitUsage, code, "result %q: %s", result, out)
		assert.Empty(t, out)
		assert.Contains(t, errw, path+`: phase ublk has the result "`+result+`", which no drain writes (ok, failed, timed_out, abandoned, stopped)`)
	}
}

// Fault (row 1805): a preStop wait that ended at its deadline ends sigtermLag (0.3 s)
// and a count's time before the drain deadline, on purpose (drain.Drainer.PreStop:
// the kubelet's time from the hook's answer to SIGTERM, and the preserve phase's
// listing, must not come out of the preserve reserve). The report said "ended:
// deadline" at +2.772s beside a drain deadline of +3.071s, and a real run under the
// kubelet was read as a wait cut 0.3 s short. The preStop line now says how long
// before the drain deadline the wait ended, and why.
func TestReportSaysThePreStopWaitEndsBeforeItsDeadlineOnPurpose(t *testing.T) {
	path := edited(t, "sandboxd-clean.json", func(rep *drain.Report) {
		t0 := rep.Budget.Start
		p := rep.Phase(drain.PhaseDrain)
		p.End, p.Deadline, p.Duration = t0.Add(2772*time.Millisecond), t0.Add(3071*time.Millisecond), 2772*time.Millisecond
		rep.PreStop.End, rep.PreStop.DrainDeadline, rep.PreStop.Waited = p.End, p.Deadline, p.Duration
	})
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, exitOK, code, errw)
	assert.Contains(t, out, "\npreStop      waited 2.772s for 12 running sandboxes; ended: deadline, 0.299s before the drain deadline (+3.071s), on purpose:\n"+
		"             the wait leaves the kubelet's time from its answer to SIGTERM and a listing's to the preserve phase\n")
}

// Fault (row 1806): the supervisor counts lost the sandboxes its server took with it
// when it exited on its own (its Report's lost_with_server, exit code 1), and report
// read the "drain" member alone. A server that died during the preStop wait, before
// SIGTERM, leaves a Report with no drain (the drain's Shutdown never ran): report
// called it "a supervisor report without a drain (the server exited on its own before
// termination)", exit 2, as a file it could not read, the 2 sandboxes lost unsaid.
// One whose drain ran but whose lost sandboxes no preserve listed read "all 12
// sandboxes preserved", exit 0. Both now say them, exit 1.
func TestReportOfTheSupervisorCountsTheSandboxesLostWithTheServer(t *testing.T) {
	const note = "the server exited on its own during the drain, before SIGTERM (killed by signal killed): 2 sandboxes lost with it"
	path := filepath.Join(t.TempDir(), "report.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"server": {"pid": 7}, "lost_with_server": ["sb-a", "sb-b"], "orphans_reaped": 0,
		"exit_code": 1, "note": "`+note+`"}`), 0o600))
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, exitNoFit, code, "%s%s", out, errw)
	assert.Empty(t, errw)
	assert.Equal(t, "Supervisor   exit code 1, no drain report: "+note+"\n\nLost with the server (2)\n  sb-a\n  sb-b\n", out)

	path = edited(t, "supervisor-clean.json", func(doc *map[string]any) {
		(*doc)["lost_with_server"], (*doc)["exit_code"] = []string{"sb-late"}, 1
	})
	code, out, errw = drainkit(t, "report", path)
	require.Equal(t, exitNoFit, code, "%s%s", out, errw)
	assert.Contains(t, out, "\nVerdict      all 12 sandboxes preserved; finished 2.858s before SIGKILL; 1 more LOST with the server, in no preserve's account\nSupervisor   exit code 1\n")
	assert.Contains(t, out, "\nLost with the server (1)\n  sb-late\n")

	// One the drain's account has (the server step gave it: not_started) is counted once.
	path = edited(t, "supervisor-clean.json", func(doc *map[string]any) {
		drainRep := (*doc)["drain"].(map[string]any)
		id := drainRep["preserve"].(map[string]any)["entries"].([]any)[0].(map[string]any)["id"]
		(*doc)["lost_with_server"] = []any{id} // exit code 0: the count alone (row 1808 reads the exit code)
	})
	code, out, _ = drainkit(t, "report", path)
	assert.Equal(t, exitOK, code, "the drain's account says what became of it: %s", out)
	assert.NotContains(t, out, "with the server")
}

// Fault (row 1807): a Report cut short (a copy cut off: kubectl exec cat piped over a
// dropped connection, a disk full under a plain cp) was refused as "not a JSON object:
// unexpected end of JSON input", which it is (its start is one) and which sent the
// operator to the file's kind, not to its end. It says the file was cut short, and
// where, with exit status 2 as before.
func TestReportCutShortSaysSo(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "sandboxd-clean.json"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "cut.json")
	require.NoError(t, os.WriteFile(path, data[:len(data)/2], 0o600))
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, exitUsage, code, out)
	assert.Equal(t, fmt.Sprintf("drainkit report: %s: cut short: the JSON ends at byte %d, inside its value (a copy cut off?)\n", path, len(data)/2), errw)

	path = filepath.Join(t.TempDir(), "list.json")
	require.NoError(t, os.WriteFile(path, []byte(`[1, 2]`), 0o600))
	_, _, errw = drainkit(t, "report", path)
	assert.Contains(t, errw, path+": not a JSON object", "JSON of another shape is still named so")
}

// Fault (row 1808): the supervisor exits 1 for what its drain's Report does not hold
// (a device daemon that exited on its own before its teardown, its devices no longer
// served; a final sweep that could not list; a server that exited with a failure) and
// says why in its note; report read the drain alone: exit 0, "all 12 sandboxes
// preserved", the note unsaid. It now shows the supervisor's exit code and note, and
// exits 1 when that exit code is not 0.
func TestReportOfTheSupervisorSaysItsExitCodeAndNote(t *testing.T) {
	const note = "the device daemon (-daemon) exited 0 on its own, before any teardown: its devices are not served"
	path := edited(t, "supervisor-clean.json", func(doc *map[string]any) {
		(*doc)["exit_code"], (*doc)["note"] = 1, note
	})
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, exitNoFit, code, "%s%s", out, errw)
	assert.Contains(t, out, "\nVerdict      all 12 sandboxes preserved; finished 2.858s before SIGKILL\nSupervisor   exit code 1: "+note+"\n")

	code, out, _ = drainkit(t, "report", filepath.Join("testdata", "supervisor-clean.json"))
	assert.Equal(t, exitOK, code)
	assert.NotContains(t, out, "Supervisor", "exit code 0 and no note: nothing to say")
}

// The summary says what became of each ublk teardown step's devices and
// why, from its Report in the file: its verdict, each device's, and its
// Note, control characters escaped (the note quotes the server's words).
// Before, the phases table said "ok" alone: a step that did nothing because
// the ublk_drv module was not loaded read as one that stopped the devices.
func TestReportSaysTheUblkVerdictAndNote(t *testing.T) {
	const note = "no ublk devices (no class/ublk-char in sysfs: the ublk_drv module is not loaded) and no daemon"
	path := edited(t, "supervisor-clean.json", func(doc *map[string]any) {
		found := false
		for _, p := range (*doc)["drain"].(map[string]any)["phases"].([]any) {
			if ph := p.(map[string]any); ph["name"] == "ublk" {
				ph["name"] = "daemon"
				detail := ph["detail"].(map[string]any)
				detail["verdict"], detail["note"] = "nothing_to_do", note+"\x1b[2J"
				detail["devices"] = []any{}
				found = true
			}
		}
		require.True(t, found, "the clean report has a ublk step")
	})
	code, out, errw := drainkit(t, "report", path)
	assert.Equal(t, exitOK, code, errw)
	assert.Contains(t, out, "\nDevices      ublk teardown (step daemon): nothing_to_do, no device (kernel 6.18.44-fc-v1045, vulnerable)\n"+
		`             note: `+note+`\x1b[2J`+"\n")

	code, out, errw = drainkit(t, "report", filepath.Join("testdata", "sandboxd-clean.json"))
	assert.Equal(t, exitOK, code, errw)
	assert.Contains(t, out, "\nDevices      ublk teardown: stopped cleanly, 2 devices (kernel 6.18.44-fc-v1045, vulnerable): ublkb0 stopped cleanly, ublkb1 stopped cleanly\n",
		"a Report of an earlier version, its verdicts as it wrote them")
}

// Fault: a supervisor's report whose server exited on its own has no drain,
// and its daemon teardown's account in its "ublk" member; report read the
// drain and the sandboxes lost with the server alone. With sandboxes lost,
// it listed them and said nothing of the devices; with none, it refused the
// file as "a supervisor report without a drain", exit 2, as one it could
// not read: an operator reading it after a crash saw nothing of a device
// left live. Both now say the teardown's verdict, kernel, devices and note,
// as a drain's ublk step is said, exit 1 (no drain ran as planned).
func TestReportOfASupervisorWithNoDrainSaysItsUblkTeardown(t *testing.T) {
	const note = "the server exited on its own before termination (exited 0); daemon step timed_out: ublk: 1 device(s) still live"
	const ublkNote = "the daemon did not exit: left running, its device live\nsecond line"
	ublkJSON := `"ublk": {"kernel": "6.8.0-31-generic", "kernel_class": "vulnerable", "verdict": "left_live", "note": "` +
		strings.ReplaceAll(ublkNote, "\n", `\n`) + `", "devices": [{"id": 0, "verdict": "left_live"}]}`
	devices := "Devices      ublk teardown: left_live, 1 device (kernel 6.8.0-31-generic, vulnerable): ublkb0 left_live\n" +
		"             note: the daemon did not exit: left running, its device live; second line\n"
	path := filepath.Join(t.TempDir(), "report.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"server": {"pid": 7, "exited": true}, "orphans_reaped": 0, "exit_code": 1, "note": "`+note+`", `+ublkJSON+`}`), 0o600))
	code, out, errw := drainkit(t, "report", path)
	require.Equal(t, exitNoFit, code, "%s%s", out, errw)
	assert.Empty(t, errw)
	assert.Equal(t, "Supervisor   exit code 1, no drain report: "+note+"\n"+devices, out)

	require.NoError(t, os.WriteFile(path, []byte(`{"server": {"pid": 7, "exited": true}, "lost_with_server": ["sb-a"], "orphans_reaped": 0, "exit_code": 1, "note": "`+note+`", `+ublkJSON+`}`), 0o600))
	code, out, errw = drainkit(t, "report", path)
	require.Equal(t, exitNoFit, code, "%s%s", out, errw)
	assert.Equal(t, "Supervisor   exit code 1, no drain report: "+note+"\n"+devices+"\nLost with the server (1)\n  sb-a\n", out)
}
