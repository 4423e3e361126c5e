package termmsg

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/gaterefusals"
	"github.com/drainkit/drainkit/internal/ublkaccount"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// MaxBytes is the kubelet's limit on a container's termination message:
// it reads at most this much of the file, its end when the file is longer
// (tail.ReadAtMost), which would lose the verdict: Write cuts a longer
// message itself, keeping its head.
const MaxBytes = 4096

// DefaultPath is the container's terminationMessagePath when the manifest
// does not set one.
const DefaultPath = "/dev/termination-log"

// EnvPath names the environment variable that overrides the path (the
// -termination-log flag wins over it).
const EnvPath = "DRAINKIT_TERMINATION_LOG"

// Summary returns the compact account of a drain for the pod's last state,
// at most MaxBytes, laid out for the pod's cut (KeptBytes): the verdict
// first, then the sandboxes by outcome, then, in a message longer than
// KeptBytes, a line saying how long it is and that the pod's status may
// end it early, then the lines of extra (why the server exits 1, where the
// full Report is), T0 and SIGKILL, every phase's result and duration, the
// ublk teardown's verdict, devices and Note (a line for each step whose
// Detail is a ublk Report: internal/ublkaccount), a pod's name that is not the pod's (drain.Report.PodMismatch), why a step
// failed, the work the gate refused, and last the lost sandboxes: how many
// and how many the line names before the first ID, each ID ending with its
// outcome in parentheses, so a cut ID reads as cut. A nil rep says that no
// drain ran.
func Summary(rep *drain.Report, extra ...string) string {
	return SummaryWith(rep, nil, extra...)
}

// SummaryWith is Summary whose first line, the verdict, is verdict's
// rewrite of it when verdict is not nil (a supervisor adding what the
// drain's account does not know), made before the layout, so the message
// still fits MaxBytes and says its own length.
func SummaryWith(rep *drain.Report, verdict func(line string) string, extra ...string) string {
	lead, rest := parts(rep)
	if verdict != nil {
		lead[0] = verdict(lead[0])
	}
	rest = append(slices.Clone(extra), rest...)
	var lost []string
	if rep != nil && rep.Preserve != nil {
		lost = lostIDs(rep.Preserve)
	}
	// The note counts the message it is in, so it is settled by passes: the
	// first finds whether one is needed, the second makes room for it, the
	// third finds it unchanged, since its length is the same in every message
	// it is in (1025 to 4096 bytes: 4 digits).
	note, msg := "", ""
	for range 3 {
		msg = compose(lead, note, rest, lost)
		want := ""
		if len(msg) > KeptBytes {
			want = fmt.Sprintf("this message is %d bytes: a pod's status keeps 12288 / its containers "+
				"(init and debug ones too) of them, so it may end early", len(msg))
		}
		if want == note {
			break
		}
		note = want
	}
	return msg
}

// KeptBytes is the most of a message that the pod's status keeps whatever
// it holds, up to 12 containers: the kubelet (status_manager.go
// normalizeStatus) cuts each terminated container's message to 12288
// bytes divided by the pod's containers, init and ephemeral ones too,
// keeping its head (3072 for 4, 1536 for 8, 1024 for 12). A longer message
// says so in its first lines.
const KeptBytes = 1024

// parts returns the lines that come before extra's (the verdict, the
// sandboxes by outcome) and those that come after them.
func parts(rep *drain.Report) (lead, rest []string) {
	if rep == nil {
		return []string{"drainkit: no drain ran"}, nil
	}
	lead = append(lead, "drainkit: "+verdict(rep))
	if line := sandboxesLine(rep); line != "" {
		lead = append(lead, line)
	}
	b := rep.Budget
	line := fmt.Sprintf("T0 %s (%s), grace %s", b.Start.UTC().Format(time.RFC3339), b.Anchor, b.Grace)
	if !b.SIGTERM.IsZero() {
		line += ", SIGTERM " + rel(b.SIGTERM, b.Start)
	}
	rest = append(rest, line+", SIGKILL due "+rel(b.Kill, b.Start))
	var phases []string
	for _, p := range rep.Phases {
		phases = append(phases, fmt.Sprintf("%s %s %.3fs", p.Name, p.Result, p.Duration.Seconds()))
	}
	rest = append(rest, "phases: "+strings.Join(phases, "; "))
	for _, p := range rep.Phases { // the phase's result alone does not say what became of the devices, nor why
		if a, ok := ublkaccount.Read(p.Detail); ok {
			rest = append(rest, clip(a.Line(p.Name), maxWhy))
		}
	}
	if why, _, _ := strings.Cut(rep.PodMismatch, "\n"); why != "" { // Err fails on it: the exit status 1
		rest = append(rest, fmt.Sprintf("pod misnamed: %s or %s is not this pod's, so no deletion of it could be read: %s",
			drain.EnvPodName, drain.EnvPodUID, clip(why, maxWhy)))
	}
	for _, p := range failedSteps(rep) {
		if why, _, _ := strings.Cut(p.Error, "\n"); why != "" { // the rest is in the full Report
			rest = append(rest, fmt.Sprintf("%s %s: %s", p.Name, p.Result, clip(why, maxWhy)))
		}
	}
	if line := refusedLine(rep); line != "" {
		rest = append(rest, line)
	}
	return lead, rest
}

// UblkLine is the line that says what a ublk teardown run outside any drain
// did, for Summary's extra when no drain ran: a supervisor's Report.Ublk,
// once its server exited on its own. It is the line a drain's ublk step
// gets ("ublk teardown: left_live, 1 device: NOTE"), bounded as that one
// is; "" for a nil rep. Without it the message said "no drain ran" and
// nothing of the devices, whose account was in the Report file alone.
func UblkLine(rep *ublk.Report) string {
	a, ok := ublkaccount.Read(rep)
	if !ok {
		return ""
	}
	return clip(a.Line(""), maxWhy)
}

// sandboxesLine counts the sandboxes by outcome, or says why there is no
// account of them; "" for a drain with no preserve phase.
func sandboxesLine(rep *drain.Report) string {
	pr := rep.Preserve
	if pr == nil {
		if noAccount(rep) == "" {
			return ""
		}
		p := rep.Phase(drain.PhasePreserve)
		n := "unknown"
		if rep.Unaccounted > 0 {
			n = fmt.Sprintf("%d counted, none accounted for", rep.Unaccounted)
		}
		why, _, _ := strings.Cut(p.Error, "\n") // a panic's stack is in the full Report
		return fmt.Sprintf("sandboxes: %s: the preserve phase %s: %s", n, p.Result, clip(why, maxWhy))
	}
	var counts []string
	for _, o := range []pause.Outcome{pause.Preserved, pause.Vanished, pause.Failed, pause.TimedOut, pause.NotStarted} {
		if n := pr.Counts[o]; n > 0 {
			counts = append(counts, fmt.Sprintf("%s %d", o, n))
		}
	}
	listErr, _, _ := strings.Cut(pr.ListErr, "\n") // a line of its own, and the counts' line bounded
	if pr.Unknown {
		counts = append(counts, "UNKNOWN: no listing succeeded: "+clip(listErr, maxWhy))
	}
	if pr.Incomplete {
		counts = append(counts, "INCOMPLETE: no listing was complete: "+clip(listErr, maxWhy))
	}
	if len(counts) == 0 { // no sandbox listed: the line said "sandboxes: 0: " and stopped
		counts = append(counts, "none listed")
	}
	return fmt.Sprintf("sandboxes: %d: %s", len(pr.Entries), strings.Join(counts, ", "))
}

// compose joins the lines, note after lead when it is not "", and ends
// with the lost line, as many of lost as fit in MaxBytes: its count and how
// many it names come first, so that a cut can only shorten the list of IDs.
func compose(lead []string, note string, rest, lost []string) string {
	lines := slices.Clone(lead)
	if note != "" {
		lines = append(lines, note)
	}
	out := strings.Join(append(lines, rest...), "\n") + "\n"
	if len(out) > MaxBytes {
		return cut(out)
	}
	if len(lost) == 0 {
		return out
	}
	return out + lostLine(lost, MaxBytes-len(out))
}

// lostLine is "lost: N (failures first): ID(outcome) ..." with its newline
// in room bytes at most, naming as many as fit ("lost: N (failures first; K
// named, each as ID(outcome)): ..." when not all do), or "" when not even
// the count fits: the verdict says how many were lost.
func lostLine(lost []string, room int) string {
	if line := fmt.Sprintf("lost: %d (failures first): %s\n", len(lost), strings.Join(lost, " ")); len(line) <= room {
		return line
	}
	line := fmt.Sprintf("lost: %d (failures first; none named: no room)\n", len(lost))
	if len(line) > room {
		return ""
	}
	ids := 0 // bytes of the IDs named so far, with a space before each
	for named, id := range lost {
		ids += 1 + len(id)
		head := fmt.Sprintf("lost: %d (failures first; %d named, each as ID(outcome)):", len(lost), named+1)
		if len(head)+ids+1 > room {
			break
		}
		line = head + " " + strings.Join(lost[:named+1], " ") + "\n"
	}
	return line
}

// refusedLine says how much work the gate refused during the drain, from the gate
// phase's Detail (drain's account of the refusals, see drain.PhaseReport.Detail): "gate
// refused 3 (first during drain, last during probe): grpc create 1, http create 1, http
// stream 1", by way in and class, as many whole kinds as fit in maxWhy bytes and then
// how many more; "" when it refused none or the Detail has no count. A refusal by a
// gate the server closed itself before the drain began is "before the drain". Refusals are the
// gate's plan, not a fault: the verdict does not name them. The Detail and the words of
// its kinds are internal/gaterefusals', which drain's log line uses too, and it is read
// from the Report file's JSON as from the Report itself.
func refusedLine(rep *drain.Report) string {
	p := rep.Phase(drain.PhaseGate)
	if p == nil {
		return ""
	}
	gd, ok := gaterefusals.Read(p.Detail)
	if !ok || gd.Refused <= 0 {
		return ""
	}
	line := fmt.Sprintf("gate refused %d", gd.Refused)
	if !gd.First.IsZero() || gd.FirstPhase != "" || gd.LastPhase != "" { // dated; no phase: before the drain
		line += fmt.Sprintf(" (first %s, last %s)", gaterefusals.During(gd.FirstPhase), gaterefusals.During(gd.LastPhase))
	}
	// Whole kinds only, then how many more: a cut inside a count would misstate it.
	// drain keeps at most gaterefusals.MaxKinds kinds and an "other" a way, so "more" is
	// two digits at most.
	const more = ", ... and 99 more"
	kinds := gd.Kinds()
	for i, k := range kinds {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		if len(line)+len(sep)+len(k) > maxWhy-len(more) {
			line += fmt.Sprintf("%s... and %d more", sep, len(kinds)-i)
			break
		}
		line += sep + k
	}
	return clip(line, maxWhy)
}

// lostIDs lists the sandboxes not preserved, failures first, each with its
// outcome.
func lostIDs(pr *pause.Report) []string {
	rank := map[pause.Outcome]int{pause.Failed: 0, pause.TimedOut: 1, pause.NotStarted: 2}
	var lost []pause.Entry
	for _, e := range pr.Entries {
		if _, ok := rank[e.Outcome]; ok {
			lost = append(lost, e)
		}
	}
	slices.SortStableFunc(lost, func(a, b pause.Entry) int { return rank[a.Outcome] - rank[b.Outcome] })
	out := make([]string, len(lost))
	for i, e := range lost {
		out[i] = e.String()
	}
	return out
}

// cut shortens s to MaxBytes, on a character boundary, marking the cut.
func cut(s string) string {
	const mark = "...\n"
	b := s[:MaxBytes-len(mark)]
	for !utf8.ValidString(b) {
		b = b[:len(b)-1]
	}
	return b + mark
}

func verdict(rep *drain.Report) string {
	var parts []string
	if why := noAccount(rep); why != "" {
		n := ""
		if rep.Unaccounted > 0 { // 0 without a count, or in a Report from before the field
			n = fmt.Sprintf("%d ", rep.Unaccounted)
		}
		parts = append(parts, n+"sandboxes UNKNOWN ("+why+")")
	}
	if pr := rep.Preserve; pr != nil {
		switch lost := pr.Lost(); {
		case pr.Unknown:
			parts = append(parts, "sandboxes UNKNOWN (no listing succeeded)")
		case lost > 0:
			parts = append(parts, fmt.Sprintf("%d of %d sandboxes LOST", lost, len(pr.Entries)))
		case len(pr.Entries) == 0:
			parts = append(parts, "no sandboxes listed") // not "all 0 sandboxes preserved"
		case preserveFault(rep):
			// The phase failed with none of what it listed lost: something it
			// never listed (a create in flight at its deadline) is.
			parts = append(parts, fmt.Sprintf("all %d listed sandboxes preserved", pr.Counts[pause.Preserved]))
		default:
			parts = append(parts, fmt.Sprintf("all %d sandboxes preserved", pr.Counts[pause.Preserved]))
		}
	}
	for _, p := range failedSteps(rep) {
		kind := "step "
		if p.Name == drain.PhasePreserve {
			kind = "phase "
		}
		parts = append(parts, kind+p.Name+" "+strings.ToUpper(string(p.Result)))
	}
	if rep.PodMismatch != "" {
		parts = append(parts, "POD MISNAMED")
	}
	parts = append(parts, exitedPart(rep.Headroom))
	return strings.Join(parts, "; ")
}

// exitedPart is the verdict's last part: when the drain ended, which it takes for the
// process's exit, headroom before SIGKILL.
func exitedPart(headroom time.Duration) string {
	if headroom >= 0 {
		return "exited " + sigkillRelative(headroom)
	}
	return "ended " + sigkillRelative(headroom)
}

// sigkillRelative says a time headroom before the expected SIGKILL.
func sigkillRelative(headroom time.Duration) string {
	if headroom >= 0 {
		return fmt.Sprintf("%.3fs before SIGKILL", headroom.Seconds())
	}
	return fmt.Sprintf("%.3fs AFTER the expected SIGKILL", -headroom.Seconds())
}

// ExitingLater rewrites the verdict (SummaryWith's first line) of rep for a server that
// exits well after its drain ended, having waited for what the drain left running (the
// gVisor worker's abandoned checkpoints): the verdict's "exited 1.496s before SIGKILL" is
// the drain's end (Report.Headroom), not the exit, so it becomes "drain ended 1.496s
// before SIGKILL; SERVER exiting 0.249s before SIGKILL", exitIn the time left before
// SIGKILL as the message is written, just before the exit.
func ExitingLater(first, server string, rep *drain.Report, exitIn time.Duration) string {
	if rep == nil {
		return first + "; " + server + " exiting " + sigkillRelative(exitIn)
	}
	return strings.Replace(first, exitedPart(rep.Headroom),
		"drain ended "+sigkillRelative(rep.Headroom)+"; "+server+" exiting "+sigkillRelative(exitIn), 1)
}

// failedSteps returns the steps that count against Report.Err: failed,
// abandoned or timed out (a drain or gate wait that timed out is the
// plan), and the preserve phase when it failed with no sandbox of its
// account lost (preserveFault): otherwise the sandboxes' account says why.
func failedSteps(rep *drain.Report) []drain.PhaseReport {
	var out []drain.PhaseReport
	for _, p := range rep.Phases {
		switch p.Name {
		case drain.PhaseDrain, drain.PhaseGate:
			continue
		case drain.PhasePreserve:
			if !preserveFault(rep) {
				continue
			}
		}
		if p.Result == drain.Failed || p.Result == drain.Abandoned || p.Result == drain.TimedOut {
			out = append(out, p)
		}
	}
	return out
}

// preserveFault reports whether the preserve phase counts against
// Report.Err while its account (Report.Preserve) lost none of the
// sandboxes it lists: gated operations still in flight at its deadline,
// whose sandboxes nothing listed, or a second run after them that failed.
func preserveFault(rep *drain.Report) bool {
	p := rep.Phase(drain.PhasePreserve)
	pr := rep.Preserve
	if p == nil || pr == nil || pr.Unknown || pr.Lost() > 0 {
		return false
	}
	return p.Result == drain.Failed || p.Result == drain.Abandoned || p.Result == drain.TimedOut
}

// maxWhy is the most of a step's error a line carries.
const maxWhy = 300

// clip is s cut to n bytes at most, on a character boundary, "…" marking a cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// noAccount says how a preserve phase that ran ended without the
// Preserver's account of the sandboxes ("the preserve phase was
// abandoned"), or "".
func noAccount(rep *drain.Report) string {
	p := rep.Phase(drain.PhasePreserve)
	if rep.Preserve != nil || p == nil || p.Result == drain.OK {
		return ""
	}
	if p.Result == drain.Abandoned {
		return "the preserve phase was abandoned"
	}
	return "the preserve phase " + string(p.Result)
}

func rel(t, t0 time.Time) string { return fmt.Sprintf("%+.3fs", t.Sub(t0).Seconds()) }

// ReportLine is the line of the message that says where the full Report is: "full
// report: PATH", path where it was written, or "the full report could not be written:
// ERR" when writing it failed with err, for Summary's extra.
func ReportLine(path string, err error) string {
	if err != nil {
		return "the full report could not be written: " + err.Error()
	}
	return "full report: " + path
}

// ServerLines are the lines a server adds to its message (Summary's extra): first, when
// its serving stopped on its own (stopped), why its exit status is 1 although the drain
// may have gone well, named after server and on one line ("sandboxd: serving the API
// stopped: ..."); then ReportLine.
func ServerLines(server string, stopped error, reportPath string, reportErr error) []string {
	where := ReportLine(reportPath, reportErr)
	if stopped == nil {
		return []string{where}
	}
	return []string{server + ": " + strings.ReplaceAll(stopped.Error(), "\n", "; "), where}
}

// StartFailed is the message of a server that could not start with err, so no drain
// ran: Summary's "no drain ran" and a line named after server, err on one line
// ("sandboxd: could not start: -hook-listen: ..."), cut to MaxBytes. A server whose New
// fails writes it, so the pod's last state says why it exited 1.
func StartFailed(server string, err error) string {
	return Summary(nil, server+": could not start: "+strings.ReplaceAll(err.Error(), "\n", "; "))
}

// Path resolves where the message goes: the flag's value if given, else
// EnvPath's, else DefaultPath. explicit says whether a flag or the
// environment chose it.
func Path(flagValue string) (path string, explicit bool) {
	if flagValue != "" {
		return flagValue, true
	}
	if v := os.Getenv(EnvPath); v != "" {
		return v, true
	}
	return DefaultPath, false
}

// Write writes msg (cut to MaxBytes) to path. Unless explicit, it writes
// only to a file that already exists, as the kubelet's mount of the
// termination message path does in a container: a server run by hand does
// not create /dev/termination-log. It returns whether it wrote.
func Write(path string, explicit bool, msg string) (bool, error) {
	if len(msg) > MaxBytes {
		msg = cut(msg)
	}
	flags := os.O_WRONLY | os.O_TRUNC
	if explicit {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if !explicit && errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("termination message %s: %w", path, err)
	}
	if _, err = f.WriteString(msg); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("termination message %s: %w", path, err)
	}
	return true, nil
}

// WriteStartFailed writes StartFailed(server, err) where Path(flagValue)
// says, for a server that could not start: the kubelet's default
// terminationMessagePolicy, File, does not fall back to the log, so without
// it the pod's last state says nothing. It returns Write's error, for the
// caller to say where it can (stderr, its log).
func WriteStartFailed(server, flagValue string, err error) error {
	path, explicit := Path(flagValue)
	_, werr := Write(path, explicit, StartFailed(server, err))
	return werr
}

// Check checks, at a server's start, that the termination message path a flag
// (flagValue, from -termination-log) or EnvPath gave can be written as Write writes it
// at exit: a path found bad there, after the whole drain, lost the drain's summary with
// one log line and left the exit status as the drain made it (docs/faults.md rows 1180,
// 1240). The default path is not checked: Write writes it only where the kubelet mounted
// it. Its error names the flag, or "$"+EnvPath when the variable gave the path, and the
// path. A path naming a directory (or ending in "/") is bad usage, whatever the machine:
// the error carries no error of the kernel's. A file the process cannot open for writing,
// or create (its directory missing, read-only, not this process's), is what the machine
// refused: the kernel's error (a syscall.Errno) is in the chain, so a server's exit status
// can tell the two apart. An existing file is not truncated; one created to check is
// removed; one that is not a regular file (a FIFO) is not opened, which would wait for
// its reader.
func Check(flagValue string) error {
	path, explicit := Path(flagValue)
	if !explicit {
		return nil
	}
	name := "-termination-log"
	if flagValue == "" {
		name = "$" + EnvPath
	}
	fi, err := os.Stat(path)
	if strings.HasSuffix(path, "/") || (err == nil && fi.IsDir()) {
		return fmt.Errorf("%s %s is a directory: name a file (the termination message is written to a file of its own)", name, path)
	}
	if err == nil && !fi.Mode().IsRegular() {
		return nil // a FIFO: opened to write, it waits for a reader, which may come at exit alone
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			defer os.Remove(path)
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", name, path, err)
	}
	return f.Close()
}
