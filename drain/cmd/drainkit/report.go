package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/lastreport"
	"github.com/drainkit/drainkit/internal/ublkaccount"
	"github.com/drainkit/drainkit/pause"
)

const reportUsage = `usage: drainkit report [-svg OUT] [-lost N] FILE

Renders a drain Report as a readable summary: when termination started and
what anchored it, when SIGKILL was due, every phase with its deadline, reserve
and result, each ublk teardown step's verdict, devices and note (why it ended
so), the sandboxes by outcome with their pause times, how many ran
again after their preserve (relisted: resumed, and preserved again) and how
many of those were lost, and every sandbox that was lost, with why (IDs and
errors are the server's words: their control characters are shown escaped,
as \x1b). FILE is sandboxd's STATE_DIR/last-shutdown.json or
the supervisor's -report file (its "drain" member is read, with its exit code
and note, and the sandboxes it counts lost with a server that exited on its
own, lost_with_server: those the drain's account lacks are listed and lost;
a report with no drain whose server took sandboxes with it, dead in the
preStop wait, lists them alone, and one whose server exited on its own says
its daemon teardown's verdict, devices and note, its "ublk" member, as a ublk
step's: exit status 1); "-" reads stdin.

With -svg OUT it also writes a timeline as SVG, which any browser opens: the
phases as bands, one bar per sandbox from the start of its pause to its end
coloured by outcome (green preserved, red failed, orange timed out, light grey
never started, blue-grey vanished), and as lines: the drain deadline (where
the preStop wait had to end), SIGTERM, the preserve deadline (no pause
started after it), the hard deadline where in-flight pauses had to end (when
it differs from the preserve deadline), the budget's deadline and the
expected SIGKILL.

Exit status: 0 when the drain went as planned (drain.Report.Err is nil:
every sandbox preserved or gone, every phase and step ended in time without
error, before SIGKILL); 1 when not: a sandbox lost, a teardown step that
failed (such as a device daemon killed with a device live), the drain
ended after SIGKILL, the pod's name (POD_NAME, POD_UID) not this pod's, so
no deletion of it could be read (the summary says what went wrong: its
Pod line says what the reads of the pod found, a static pod too), the
supervisor's own exit code not 0 (its note says why: a device daemon gone
before its teardown, a final sweep that could not list), or the drain did
not finish: FILE is the account a server keeps while its drain runs
("unfinished": a SIGKILL or a crash came before the final Report), which
the summary says with what was known when it was last written; 2 when FILE cannot be
read or contradicts itself (counts that are not its sandboxes by outcome, an
outcome or a phase result no drain writes: a hand-edited or damaged file, or
a later version's), the error naming it,
or -svg cannot be written after a drain that went as planned (after one that
did not, 1 still: the summary is printed).

Examples:

	drainkit report /var/lib/sandboxd/last-shutdown.json
	drainkit report -svg drain.svg last-shutdown.json && xdg-open drain.svg
	kubectl exec ds/sandboxd -- cat /state/last-shutdown.json | drainkit report -
`

func runReport(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("report", reportUsage, stdout)
	svgOut := fs.String("svg", "", "also write the timeline as SVG to `OUT`")
	lostMax := fs.Int("lost", 20, "list at most `N` lost sandboxes (0: all)")
	pos, err := parse(fs, args)
	if err == nil && len(pos) != 1 {
		err = fmt.Errorf("want one FILE, got %d arguments", len(pos))
	}
	if err == nil && *lostMax < 0 {
		err = fmt.Errorf("-lost must not be negative, got %d", *lostMax)
	}
	if err != nil {
		return usageError(stderr, "report", err)
	}
	rep, unfinished, sup, err := loadReport(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "drainkit report: %v\n", err)
		return exitUsage
	}
	var out bytes.Buffer
	if rep == nil { // a supervisor's, whose server exited on its own with sandboxes: no drain ran to its end
		sup.writeNoDrain(&out)
		if _, err := stdout.Write(out.Bytes()); err != nil {
			fmt.Fprintf(stderr, "drainkit report: %v\n", err)
			return exitUsage
		}
		return exitNoFit
	}
	lostWithServer := sup.outsideDrain(rep)
	writeSummary(&out, rep, unfinished, *lostMax, sup)
	writeLostWithServer(&out, lostWithServer)
	if _, err := stdout.Write(trimLines(out.Bytes())); err != nil {
		fmt.Fprintf(stderr, "drainkit report: %v\n", err)
		return exitUsage
	}
	if *svgOut != "" {
		var svg bytes.Buffer
		writeSVG(&svg, rep)
		if err := os.WriteFile(*svgOut, svg.Bytes(), 0o644); err != nil {
			fmt.Fprintf(stderr, "drainkit report: -svg: %v\n", err)
			// The summary is printed: a drain that went wrong still
			// exits 1, which a script reads before an unwritten picture.
			if rep.Err() != nil || unfinished != nil || len(lostWithServer) > 0 || sup.failed() {
				return exitNoFit
			}
			return exitUsage
		}
	}
	// A drain that did not finish did not go as planned, nor one whose supervisor
	// exited with a failure its drain's Report does not hold.
	if rep.Err() != nil || unfinished != nil || len(lostWithServer) > 0 || sup.failed() {
		return exitNoFit
	}
	return exitOK
}

// failed reports whether the supervisor exited with a failure (its note says
// why); false for a drain Report read alone.
func (f *supervisorFacts) failed() bool { return f != nil && f.ExitCode != 0 }

// writeExit says the supervisor's exit code and note, when either says
// anything: what it exited 1 for may be nothing its drain's Report holds (a
// device daemon gone before its teardown, a final sweep that could not list).
func (f *supervisorFacts) writeExit(w io.Writer) {
	if f == nil || (f.ExitCode == 0 && f.Note == "") {
		return
	}
	line := fmt.Sprintf("exit code %d", f.ExitCode)
	if f.Note != "" {
		line += ": " + oneLine(f.Note, 300)
	}
	fmt.Fprintf(w, "Supervisor   %s\n", line)
}

// supervisorFacts is what the supervisor's report (examples/supervisor's Report) says
// beside its drain: the sandboxes lost with a server that exited on its own, which it
// counts lost and exits 1 for, and its note. Nil for a drain Report read alone.
type supervisorFacts struct {
	LostWithServer []string `json:"lost_with_server"`
	ExitCode       int      `json:"exit_code"`
	Note           string   `json:"note"`
	// Ublk is the daemon teardown's account when it ran outside any drain
	// (the server exited on its own), read as a drain step's Detail is.
	Ublk json.RawMessage `json:"ublk"`
}

// ublk is the account of the daemon teardown the supervisor ran outside any
// drain, if its report has one.
func (f *supervisorFacts) ublk() (*ublkaccount.Account, bool) {
	if f == nil || len(f.Ublk) == 0 {
		return nil, false
	}
	return ublkaccount.Read(f.Ublk)
}

// outsideDrain returns the sandboxes lost with the server that rep's account has no
// entry for (the server step gives it those it knows, not_started: counted once).
func (f *supervisorFacts) outsideDrain(rep *drain.Report) []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, id := range f.LostWithServer {
		if rep.Preserve == nil || !slices.ContainsFunc(rep.Preserve.Entries, func(e pause.Entry) bool { return e.ID == id }) {
			out = append(out, id)
		}
	}
	return out
}

// writeNoDrain writes the summary of a supervisor's report with no drain whose
// server took sandboxes with it (a server dead during the preStop wait: the drain's
// Shutdown never ran), or whose daemon teardown ran outside any drain: that
// teardown's verdict, devices and note, then the sandboxes lost.
func (f *supervisorFacts) writeNoDrain(w io.Writer) {
	fmt.Fprintf(w, "Supervisor   exit code %d, no drain report: %s\n", f.ExitCode, oneLine(f.Note, 300))
	if a, ok := f.ublk(); ok {
		writeUblkAccount(w, a, "")
	}
	writeLostWithServer(w, f.LostWithServer)
}

// writeLostWithServer lists the sandboxes lost with the server outside the drain's
// account, if any.
func writeLostWithServer(w io.Writer, ids []string) {
	if len(ids) == 0 {
		return
	}
	fmt.Fprintf(w, "\nLost with the server (%d)\n", len(ids))
	for _, id := range ids {
		fmt.Fprintf(w, "  %s\n", shownID(id))
	}
}

// loadReport reads a drain Report from path ("-" is stdin): a drain.Report
// as sandboxd writes it, or the supervisor's report with the drain's in
// its "drain" member. The account of a drain that did not finish (a
// SIGKILL before its Report: lastreport.Progress) comes with what it says
// of that, nil for a finished drain's.
//
// A supervisor's report comes with what it says beside the drain (supervisorFacts);
// one with no drain whose server took sandboxes with it comes with those alone, a nil
// Report.
func loadReport(path string) (*drain.Report, *lastreport.Unfinished, *supervisorFacts, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return parseReport(path, data)
}

func parseReport(name string, data []byte) (*drain.Report, *lastreport.Unfinished, *supervisorFacts, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		if cutShort(data) {
			return nil, nil, nil, fmt.Errorf("%s: cut short: the JSON ends at byte %d, inside its value (a copy cut off?)", name, len(data))
		}
		return nil, nil, nil, fmt.Errorf("%s: not a JSON object: %w", name, err)
	}
	var sup *supervisorFacts
	if _, ok := top["phases"]; !ok {
		inner, ok := top["drain"]
		_, server := top["server"]
		if ok || server {
			sup = new(supervisorFacts)
			if err := json.Unmarshal(data, sup); err != nil {
				return nil, nil, nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		if !ok {
			if _, teardown := sup.ublk(); server && (len(sup.LostWithServer) > 0 || teardown) {
				return nil, nil, sup, nil
			}
			if server {
				return nil, nil, nil, fmt.Errorf("%s: a supervisor report without a drain (%s)", name, cmp.Or(oneLine(sup.Note, 300), "the server exited on its own before termination"))
			}
			return nil, nil, nil, fmt.Errorf("%s: neither a drain Report (no \"phases\") nor a supervisor report (no \"drain\")", name)
		}
		data = inner
	}
	rep, unfinished, err := parseDrain(name, data)
	return rep, unfinished, sup, err
}

// cutShort reports whether data is JSON that ends before its value does: a
// file cut short, where "not a JSON object" sent the reader to the file's kind.
func cutShort(data []byte) bool {
	var v any
	return errors.Is(json.NewDecoder(bytes.NewReader(data)).Decode(&v), io.ErrUnexpectedEOF)
}

// parseDrain reads data, a drain Report or a drain's unfinished account.
func parseDrain(name string, data []byte) (*drain.Report, *lastreport.Unfinished, error) {
	// One decode also tells whether headroom_ns is there: the outer
	// field, shallower, takes the key from the embedded Report's.
	var in struct {
		drain.Report
		Headroom   *time.Duration         `json:"headroom_ns"`
		Unfinished *lastreport.Unfinished `json:"unfinished"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	rep := in.Report
	if rep.Budget.Start.IsZero() {
		return nil, nil, fmt.Errorf("%s: the report has no budget start (T0)", name)
	}
	if err := checkResults(rep.Phases); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if in.Unfinished != nil { // no end, no headroom: cut before its first phase may have ended
		if err := checkPreserve(rep.Preserve); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		return &rep, in.Unfinished, nil
	}
	switch {
	case in.Headroom != nil:
		rep.Headroom = *in.Headroom
	case !rep.End.IsZero() && !rep.Budget.Kill.IsZero():
		// A Report without its headroom (written by hand, or cut) read as
		// ending 0 s before SIGKILL, "finished - before SIGKILL", and a
		// drain that ended after it passed: it is the expected SIGKILL
		// less the end, as drain computes it.
		rep.Headroom = rep.Budget.Kill.Sub(rep.End)
	}
	if len(rep.Phases) == 0 {
		// Every drain's Report has the preserve phase at least, an unmade
		// Drainer's too: an empty list was cut or edited, and read as it
		// is it passed for a drain that went as planned.
		return nil, nil, fmt.Errorf("%s: the report has no phase, where every drain's has the preserve phase at least: the file was cut or edited", name)
	}
	if err := checkPreserve(rep.Preserve); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return &rep, nil, nil
}

// results are the results a drain writes for a phase.
var results = []drain.Result{drain.OK, drain.Failed, drain.TimedOut, drain.Abandoned, drain.Stopped}

// checkResults refuses a phase whose result no drain writes (a later version's, a
// damaged or hand-edited file): Report.Err faults only those it knows, and read as
// the rest, such a phase passed for one that went well, exit 0.
func checkResults(phases []drain.PhaseReport) error {
	for _, p := range phases {
		if slices.Contains(results, p.Result) {
			continue
		}
		names := make([]string, len(results))
		for i, r := range results {
			names[i] = string(r)
		}
		return fmt.Errorf("phase %s has the result %q, which no drain writes (%s)",
			printable(p.Name), printable(string(p.Result)), strings.Join(names, ", "))
	}
	return nil
}

// outcomes are the outcomes a drain writes, in the order the report
// lists them.
var outcomes = []pause.Outcome{pause.Preserved, pause.Failed, pause.TimedOut, pause.NotStarted, pause.Vanished}

// checkPreserve refuses a preserve account that contradicts itself (a
// hand-edited or damaged file): an outcome no drain writes, or counts
// that are not its entries by outcome, as pause.Report.Counts is. The
// summary reads both, the verdict's "N of M" one from each: rendered as
// if whole, it said "4 of 0 sandboxes LOST" beside 56 preserved.
func checkPreserve(pr *pause.Report) error {
	if pr == nil {
		return nil
	}
	tally := map[pause.Outcome]int{}
	for _, e := range pr.Entries {
		if !slices.Contains(outcomes, e.Outcome) {
			names := make([]string, len(outcomes))
			for i, o := range outcomes {
				names[i] = string(o)
			}
			return fmt.Errorf("sandbox %s has the outcome %q, which no drain writes (%s)",
				shownID(e.ID), printable(string(e.Outcome)), strings.Join(names, ", "))
		}
		tally[e.Outcome]++
	}
	same := true
	for _, o := range outcomes {
		same = same && pr.Counts[o] == tally[o]
	}
	for o, n := range pr.Counts {
		same = same && (n == 0 || slices.Contains(outcomes, o))
	}
	if same {
		return nil
	}
	counted := 0
	for _, n := range pr.Counts {
		counted += n
	}
	return fmt.Errorf("the preserve account's counts (%d sandboxes: %s) disagree with its %d entries (%s): the file was edited or damaged",
		counted, byOutcome(pr.Counts), len(pr.Entries), byOutcome(tally))
}

// byOutcome lists the non-zero counts, "preserved 56, timed_out 4", or
// "none"; counts of an outcome no drain writes come last, as written.
func byOutcome(counts map[pause.Outcome]int) string {
	var parts []string
	for _, o := range outcomes {
		if counts[o] != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, counts[o]))
		}
	}
	var other []string
	for o, n := range counts {
		if n != 0 && !slices.Contains(outcomes, o) {
			other = append(other, fmt.Sprintf("%s %d", printable(string(o)), n))
		}
	}
	slices.Sort(other)
	if parts = append(parts, other...); len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// rel formats t as seconds from t0, or "-" for the zero time.
func rel(t, t0 time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%+.3fs", t.Sub(t0).Seconds())
}

// secs formats d in seconds with millisecond precision, or "-" for zero.
// Beyond a century it says so: such a time is a sum that saturated at
// the largest Duration (the deadline package's reserves, a pause time at
// an absurd rate), or one taken from it (a shortfall), and printed in
// seconds it read as a typo (9223372036.855s).
func secs(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d >= century:
		return "over 100 years"
	case d <= -century:
		return "below -100 years"
	}
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// century is where secs stops counting seconds.
const century = 100 * 365 * 24 * time.Hour

// writeSummary writes the text summary of rep, listing at most lostMax
// lost sandboxes (0: all), and of what sup, a supervisor's report around it
// (nil: none), says beside it: its exit code and note, and the sandboxes lost
// with its server in no preserve's account, which the verdict counts.
func writeSummary(w io.Writer, rep *drain.Report, unfinished *lastreport.Unfinished, lostMax int, sup *supervisorFacts) {
	lostWithServer := len(sup.outsideDrain(rep))
	b := rep.Budget
	t0 := b.Start
	fmt.Fprintf(w, "Termination  T0 %s (anchored by %s), grace %s\n", t0.UTC().Format("2006-01-02 15:04:05.000 MST"), anchor(string(b.Anchor)), b.Grace)
	fmt.Fprintf(w, "             SIGTERM %s, deadline %s (margin %s), SIGKILL due %s\n",
		rel(b.SIGTERM, t0), rel(b.Deadline, t0), secs(b.Margin), rel(b.Kill, t0))
	if !b.Restart.IsZero() {
		fmt.Fprintf(w, "             the kubelet ran the termination over at %s with grace %s (the hook ran again): SIGKILL follows that run\n",
			rel(b.Restart, t0), b.RestartGrace)
	}
	if rep.Cause != "" {
		fmt.Fprintf(w, "Began by     %s%s\n", oneLine(rep.Cause, 100), laterSignals(rep.Signals, t0))
	}
	if unfinished != nil {
		writeUnfinished(w, unfinished, t0)
	} else {
		more := ""
		if lostWithServer > 0 {
			more = fmt.Sprintf("; %d more LOST with the server, in no preserve's account", lostWithServer)
		}
		fmt.Fprintf(w, "Verdict      %s%s\n", verdict(rep), more)
	}
	sup.writeExit(w)
	writePod(w, rep)
	if rep.Forced {
		fmt.Fprintf(w, "Forced       at %s (SIGINT, Force or a cancelled context: remaining waits cut short)\n", rel(rep.ForcedAt, t0))
	}
	if rep.Shortfall > 0 {
		fmt.Fprintf(w, "Shortfall    when preserving started, the time left was %s short of the reserves: phases shared it\n", secs(rep.Shortfall))
	}
	if ps := rep.PreStop; ps != nil {
		fmt.Fprintf(w, "preStop      waited %s for %d running sandboxes; ended: %s%s\n", secs(ps.Waited), ps.Running, ps.Reason, endedEarly(ps, t0))
	}

	fmt.Fprintf(w, "\nPhases (times from T0)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  phase\tstart\tend\ttook\tdeadline\thard\treserve\tshort\tresult")
	for _, p := range rep.Phases {
		res := string(p.Result)
		if p.Error != "" && p.Error != res {
			res += ": " + oneLine(p.Error, 70)
		}
		if p.Forced {
			res += " (forced)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, rel(p.Start, t0), rel(p.End, t0), secs(p.Duration),
			rel(p.Deadline, t0), rel(p.Hard, t0), secs(p.Reserve), secs(p.Short), res)
	}
	tw.Flush()
	writeUblk(w, rep)

	pr := rep.Preserve
	if pr == nil && unfinished != nil {
		fmt.Fprintf(w, "\nSandboxes    NOT KNOWN: the preserve phase had not ended; the drain counted %d running%s\n",
			unfinished.Counted, nodeCounts(unfinished.Node))
		return
	}
	if pr == nil {
		if why := noAccount(rep); why != "" {
			if rep.Unaccounted > 0 {
				why = fmt.Sprintf("%d the drain counted running, none accounted for: %s", rep.Unaccounted, why)
			}
			fmt.Fprintf(w, "\nSandboxes    UNKNOWN: %s\n", why)
			return
		}
		fmt.Fprintf(w, "\nSandboxes    no preserve phase ran\n")
		return
	}
	learnedBest := ""
	if pr.LearnedLimit > 0 { // an adaptive limit that compared two levels: where the next drain may start
		learnedBest = fmt.Sprintf(", %d learned best", pr.LearnedLimit)
	}
	fmt.Fprintf(w, "\nSandboxes    %d listed in %d pass(es), concurrency limit %d at the end%s\n", len(pr.Entries), pr.Passes, pr.Limit, learnedBest)
	if n, lost := relisted(pr); n > 0 { // their outcomes and times below are those of their last preserve
		end := "none lost"
		if lost > 0 {
			end = fmt.Sprintf("%d LOST", lost)
		}
		fmt.Fprintf(w, "             %d relisted: ran again after their preserve (resumed, or listed late); preserving them again: %d preserved, %s\n",
			n, n-lost, end)
	}
	if pr.Unknown {
		fmt.Fprintf(w, "             UNKNOWN: no listing succeeded, nothing here means anything: %s\n", printable(pr.ListErr))
	}
	if pr.Incomplete {
		fmt.Fprintf(w, "             INCOMPLETE: no listing was complete, sandboxes not listed may have run: %s\n", printable(pr.ListErr))
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  outcome\tcount\tp50\tp90\tmax")
	for _, o := range []pause.Outcome{pause.Preserved, pause.Vanished, pause.Failed, pause.TimedOut, pause.NotStarted} {
		n := pr.Counts[o]
		if n == 0 {
			continue
		}
		var ds []time.Duration
		for _, e := range pr.Entries {
			if e.Outcome == o && e.Duration > 0 {
				ds = append(ds, e.Duration)
			}
		}
		p50, p90, mx := quantiles(ds)
		fmt.Fprintf(tw, "  %s\t%5d\t%s\t%s\t%s\n", o, n, secs(p50), secs(p90), secs(mx))
	}
	tw.Flush()
	if pr.ListErr != "" && !pr.Unknown && !pr.Incomplete {
		fmt.Fprintf(w, "             last listing error: %s\n", printable(pr.ListErr))
	}

	var lost []pause.Entry
	for _, e := range pr.Entries {
		if e.Outcome.Lost() {
			lost = append(lost, e)
		}
	}
	if len(lost) == 0 {
		return
	}
	rank := map[pause.Outcome]int{pause.Failed: 0, pause.TimedOut: 1, pause.NotStarted: 2}
	slices.SortStableFunc(lost, func(a, b pause.Entry) int { return rank[a.Outcome] - rank[b.Outcome] })
	fmt.Fprintf(w, "\nLost (%d)\n", len(lost))
	shown := lost
	if lostMax > 0 && len(shown) > lostMax {
		shown = shown[:lostMax]
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range shown {
		when := "never started"
		if !e.Start.IsZero() {
			when = fmt.Sprintf("%s..%s, %d attempt(s)", rel(e.Start, t0), rel(e.End, t0), e.Attempts)
		}
		if e.Relisted > 0 { // it was preserved, then ran again: this is the preserve after
			when = fmt.Sprintf("preserved, ran again (relisted %d), then %s", e.Relisted, when)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", shownID(e.ID), e.Outcome, when, oneLine(e.Error, 90))
	}
	tw.Flush()
	if len(shown) < len(lost) {
		fmt.Fprintf(w, "  ... and %d more (-lost 0 lists all)\n", len(lost)-len(shown))
	}
}

// writeUblk says, for each step whose Detail is a ublk teardown's Report,
// its verdict, the kernel it decided on, each device's verdict (the first
// maxUblkDevices) and its Note, why it ended so: the phases table says
// "ok" of a step that found no ublk_drv as of one that stopped every
// device. The Note and the verdicts are the file's words, shown printable.
func writeUblk(w io.Writer, rep *drain.Report) {
	for _, p := range rep.Phases {
		if a, ok := ublkaccount.Read(p.Detail); ok {
			writeUblkAccount(w, a, p.Name)
		}
	}
}

// writeUblkAccount writes the Devices line of a, the account of the ublk
// teardown of step ("" for one outside any drain), and its note.
func writeUblkAccount(w io.Writer, a *ublkaccount.Account, step string) {
	line := printable(a.Head(step))
	if a.Kernel != "" {
		line += fmt.Sprintf(" (kernel %s, %s)", printable(a.Kernel), printable(string(a.KernelClass)))
	}
	var devs []string
	for i, d := range a.Devices {
		if i == maxUblkDevices {
			devs = append(devs, fmt.Sprintf("... and %d more", len(a.Devices)-i))
			break
		}
		devs = append(devs, fmt.Sprintf("ublkb%d %s", d.ID, printable(string(d.Verdict))))
	}
	if len(devs) > 0 {
		line += ": " + strings.Join(devs, ", ")
	}
	fmt.Fprintf(w, "Devices      %s\n", line)
	if a.Note != "" {
		fmt.Fprintf(w, "             note: %s\n", printable(strings.ReplaceAll(a.Note, "\n", "; ")))
	}
}

// maxUblkDevices is how many devices' verdicts a ublk step's line names.
const maxUblkDevices = 16

// endedEarly says, of a preStop wait that ended at its deadline, that it ended
// before the drain deadline, by how much, and why (drain.Drainer.PreStop: the
// kubelet's time to SIGTERM and the preserve phase's listing are left to that
// phase), or "": read beside the deadline alone, the end looked like a wait cut
// short.
func endedEarly(ps *drain.PreStopSummary, t0 time.Time) string {
	early := ps.DrainDeadline.Sub(ps.End)
	if ps.Reason != "deadline" || ps.End.IsZero() || ps.DrainDeadline.IsZero() || early <= 0 {
		return ""
	}
	return fmt.Sprintf(", %s before the drain deadline (%s), on purpose:\n"+
		"             the wait leaves the kubelet's time from its answer to SIGTERM and a listing's to the preserve phase",
		secs(early), rel(ps.DrainDeadline, t0))
}

func anchor(a string) string {
	if a == "" {
		return "nothing: never anchored"
	}
	return a
}

// laterSignals names the signals after the first (the one that began the
// drain), with when each came and what it did.
func laterSignals(sigs []drain.ReceivedSignal, t0 time.Time) string {
	if len(sigs) < 2 {
		return ""
	}
	var b strings.Builder
	for i, s := range sigs[1:] {
		sep := ", "
		if i == 0 {
			sep = "; then "
		}
		did := "(forces)"
		if s.Name == "SIGTERM" {
			did = "(the kubelet's again: not forcing)"
		}
		fmt.Fprintf(&b, "%s%s at %s %s", sep, oneLine(s.Name, 20), rel(s.At, t0), did)
	}
	return b.String()
}

// verdict is the one line an operator reads first.
func verdict(rep *drain.Report) string {
	var parts []string
	if why := noAccount(rep); why != "" {
		head, _, _ := strings.Cut(why, ": ")
		n := ""
		if rep.Unaccounted > 0 { // 0 in a Report written before the field, or without a count
			n = fmt.Sprintf("%d ", rep.Unaccounted)
		}
		parts = append(parts, n+"sandboxes UNKNOWN ("+head+")")
	}
	if pr := rep.Preserve; pr != nil {
		total := len(pr.Entries)
		switch lost := pr.Lost(); {
		case pr.Unknown:
			parts = append(parts, "sandboxes UNKNOWN (no listing succeeded)")
		case lost > 0:
			v := fmt.Sprintf("%d of %d sandboxes LOST", lost, total)
			if _, again := relisted(pr); again > 0 {
				v += fmt.Sprintf(" (%d ran again after their preserve)", again)
			}
			parts = append(parts, v)
		case pr.Incomplete:
			parts = append(parts, fmt.Sprintf("all %d listed sandboxes preserved", pr.Counts[pause.Preserved]))
		default:
			parts = append(parts, fmt.Sprintf("all %d sandboxes preserved", pr.Counts[pause.Preserved]))
		}
		if pr.Incomplete {
			parts = append(parts, "listing INCOMPLETE (sandboxes not listed may have run)")
		}
	}
	if rep.Headroom >= 0 {
		parts = append(parts, fmt.Sprintf("finished %s before SIGKILL", secs(rep.Headroom)))
	} else {
		parts = append(parts, fmt.Sprintf("finished %s AFTER the expected SIGKILL", secs(-rep.Headroom)))
	}
	if rep.PodMismatch != "" { // Err fails on it: the exit status 1 names it here
		parts = append(parts, "POD MISNAMED (no deletion of this pod could be read)")
	}
	for _, p := range rep.Phases {
		if p.Result == drain.Failed || p.Result == drain.Abandoned ||
			(p.Result == drain.TimedOut && p.Name != drain.PhaseDrain && p.Name != drain.PhaseGate) {
			if p.Name != drain.PhasePreserve {
				parts = append(parts, fmt.Sprintf("step %s %s", p.Name, p.Result))
			}
		}
	}
	return strings.Join(parts, "; ")
}

// writePod says what the drain's reads of the pod found (Config.Pod): a
// name that is not the pod's, which fails Report.Err; a static pod, whose
// deletion the API server does not show, so that no deletion of its mirror
// pod was taken for its own; a UID never known. It writes nothing for a pod read as itself, or
// none read.
func writePod(w io.Writer, rep *drain.Report) {
	var lines []string
	if rep.PodMismatch != "" {
		lines = append(lines, fmt.Sprintf("MISNAMED: %s or %s is not this pod's, so no deletion of it could be read: %s",
			drain.EnvPodName, drain.EnvPodUID, oneLine(rep.PodMismatch, 200)))
	}
	if rep.StaticPod {
		lines = append(lines, "a static pod: the API server shows no deletion of it (the kubelet stops it when its manifest is removed, with its grace from SIGTERM): no deletion of its mirror pod was taken for its own")
	}
	if rep.PodUIDUnknown {
		lines = append(lines, fmt.Sprintf("its UID never known (no %s, no read found the pod): a pod gone from the API server could not be told from a name it never had", drain.EnvPodUID))
	}
	for i, l := range lines {
		head := "Pod          "
		if i > 0 {
			head = "             "
		}
		fmt.Fprintf(w, "%s%s\n", head, l)
	}
}

// relisted counts pr's sandboxes that a later listing found running again
// after their preserve (pause.Entry.Relisted), and how many of them were
// lost.
func relisted(pr *pause.Report) (n, lost int) {
	for _, e := range pr.Entries {
		if e.Relisted == 0 {
			continue
		}
		n++
		if e.Outcome.Lost() {
			lost++
		}
	}
	return n, lost
}

// writeUnfinished says plainly that the file holds no final Report, and what its
// account knew when it was last written: a SIGKILL (the kubelet's, the OOM killer's) or
// a crash ended the process before the final Report, or the process could not write it
// (a file system full or remounted read-only: lastreport.Progress.Finish keeps the
// account then, docs/faults.md row 1611).
func writeUnfinished(w io.Writer, u *lastreport.Unfinished, t0 time.Time) {
	running := "no phase running (the last had ended)"
	if u.Phase != "" {
		running = "the " + u.Phase + " phase running"
	}
	fmt.Fprintf(w, "Verdict      UNFINISHED: no final Report: the process ended before it (a SIGKILL, a crash) or could not write it\n")
	fmt.Fprintf(w, "             (its file system full or read-only: its log and termination message say);\n")
	fmt.Fprintf(w, "             this is its account as written at %s, %s, %d sandboxes counted running%s\n",
		rel(u.At, t0), running, u.Counted, nodeCounts(u.Node))
	if len(u.Plan) > 0 {
		parts := make([]string, len(u.Plan))
		for i, p := range u.Plan {
			parts[i] = fmt.Sprintf("%s by %s", p.Name, rel(p.Deadline, t0))
		}
		fmt.Fprintf(w, "Planned      then: %s\n", strings.Join(parts, ", "))
	}
}

// nodeCounts says the server's own count of its sandboxes by state, "" for none.
func nodeCounts(node map[string]int) string {
	if len(node) == 0 {
		return ""
	}
	states := slices.Sorted(maps.Keys(node))
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = fmt.Sprintf("%s %d", printable(s), node[s])
	}
	return "; the server's count: " + strings.Join(parts, ", ")
}

// noAccount says why a preserve phase that ran left no account of the
// sandboxes (the Preserver was abandoned, or returned none), or "".
func noAccount(rep *drain.Report) string {
	p := rep.Phase(drain.PhasePreserve)
	if rep.Preserve != nil || p == nil || p.Result == drain.OK {
		return ""
	}
	why := "the preserve phase " + string(p.Result)
	switch p.Result {
	case drain.Abandoned:
		why = "the preserve phase was abandoned"
	case drain.TimedOut:
		why = "the preserve phase timed out"
	}
	if p.Error != "" {
		why += ": " + oneLine(p.Error, 90)
	}
	return why
}

// quantiles returns the nearest-rank median, 90th percentile and maximum.
func quantiles(ds []time.Duration) (p50, p90, mx time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return at(0.5), at(0.9), ds[len(ds)-1]
}

// oneLine shortens s to one line of at most n runes, printable.
func oneLine(s string, n int) string {
	s = printable(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// printable is s with every rune that is not graphic written as its Go
// escape (ESC as \x1b, a tab as \t). A sandbox's ID and its errors are
// the server's words (a listed ID, the start of an answer's body): as they
// came, a control character drives the operator's terminal or breaks the
// summary's columns, and in the SVG, where XML allows none, the browser
// shows a parse error instead of the timeline.
func printable(s string) string {
	var b strings.Builder
	for _, r := range s { // invalid UTF-8 is U+FFFD here, graphic
		if unicode.IsGraphic(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRuneToGraphic(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// shownID is a sandbox's ID as the report shows it: printable, and
// "(no ID)" for a sandbox the server listed without one (pause's flawed
// element, pause/httpsource), whose column would be blank.
func shownID(id string) string {
	if id == "" {
		return "(no ID)"
	}
	return printable(id)
}

// trimLines removes the trailing blanks a tabwriter leaves after an empty
// last column.
func trimLines(b []byte) []byte {
	lines := bytes.Split(b, []byte("\n"))
	for i, l := range lines {
		lines[i] = bytes.TrimRight(l, " \t")
	}
	return bytes.Join(lines, []byte("\n"))
}
