package drain

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/gaterefusals"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// A Result is how a phase or step ended.
type Result string

// The results a PhaseReport can hold.
const (
	// OK: the phase finished its work before its deadline.
	OK Result = "ok"
	// Failed: the step returned an error before its deadline, or the
	// preserve phase lost sandboxes or never learned them (no listing
	// succeeded).
	Failed Result = "failed"
	// TimedOut: the phase's deadline (or force mode) ended it; a step
	// returned in time after its context ended.
	TimedOut Result = "timed_out"
	// Abandoned: the step did not return by its deadline and was left
	// running; the shutdown went on without it.
	Abandoned Result = "abandoned"
	// Stopped: a wait (the preStop wait) was ended before its deadline by
	// SIGTERM or force mode: the kubelet's timeline, not a timeout. What it
	// waited for is the next phase's work.
	Stopped Result = "stopped"
)

// A PhaseReport is the account of one phase or teardown step.
type PhaseReport struct {
	Name     string    `json:"name"`     // the phase or step name
	Start    time.Time `json:"start"`    // when it started
	End      time.Time `json:"end"`      // when it ended (or was abandoned)
	Deadline time.Time `json:"deadline"` // the deadline it ran against
	// Hard is when work the phase started had to be over, where it differs
	// from Deadline (the preserve phase's in-flight preserves).
	Hard     time.Time     `json:"hard,omitzero"`
	Duration time.Duration `json:"duration_ns"` // End - Start
	// Reserve is the time the plan reserved for the phase.
	Reserve time.Duration `json:"reserve_ns,omitempty"`
	// Short is how much less than its reserve the phase had from its
	// start to its deadline: the budget (or force mode) squeezed it.
	Short  time.Duration `json:"short_ns,omitempty"`
	Result Result        `json:"result"`           // how it ended
	Error  string        `json:"error,omitempty"`  // the error, or why the wait ended
	Forced bool          `json:"forced,omitempty"` // force mode was on when it ended
	// Detail is what a step's Run returned about what it did (the ublk
	// step's per-device report), or nil. The gate phase's is the account of
	// the operations the gate refused from its close until the Report was
	// made, whichever phase they came in: "refused", how many; "by", how
	// many by way in ("http": Admit, Middleware, Server.Admit; "grpc":
	// draingrpc's interceptors; "enter": Gate.Enter called by the server)
	// and class (the first 32 kinds, later ones under the class "other");
	// "first" and "last", when the first and the last were refused, and
	// "first_phase" and "last_phase", the phase that was running then
	// ("drain", "gate", "preserve" or a step's name; none, the field left
	// out, for a refusal before the drain began, by a gate the server
	// closed itself before Shutdown: "before the drain" in the log line).
	// The drain's log line says the same. A step's Detail that cannot be
	// encoded (its MarshalJSON panics or fails, a field JSON has no form
	// for) is replaced by a text saying so, logged at ERROR, so that the
	// Report encodes.
	Detail any `json:"detail,omitempty"`
}

// A Report is the account of one shutdown: every phase in the order it ran
// ("drain" when a preStop hook ran, "gate", "preserve", then every step),
// the Preserver's own Report, and the headroom left before SIGKILL. It is
// JSON-marshalable.
type Report struct {
	Start time.Time `json:"start"` // when Shutdown started (SIGTERM)
	End   time.Time `json:"end"`   // when the last phase ended
	// Budget is the budget at the end: T0, its anchor, SIGTERM and the
	// expected SIGKILL.
	Budget  deadline.State  `json:"budget"`
	PreStop *PreStopSummary `json:"prestop,omitempty"` // the preStop wait, if a hook called PreStop
	Phases  []PhaseReport   `json:"phases"`            // every phase and step, in order
	// Preserve is the Preserver's account of every sandbox, with every
	// step's final sweep merged in (a step whose Detail is a *pause.Report,
	// see Step), and so is the preserve phase's second Run after gated
	// operations still in flight (see Drainer.Shutdown): a sandbox the
	// sweep found running again counts one more Relisted and takes the
	// sweep's outcome (still Preserved when the sweep's preserve found it
	// already gone: Vanished, as a preserve again within a Run); one the
	// preserve phase could not preserve takes the sweep's outcome and, when
	// the sweep made no Preserve call for it (not started), keeps the
	// phase's Error and Stack after the sweep's own; and one the preserve
	// phase never listed gets an entry, its Pass counted on from the
	// phase's passes. A sweep is not merged when the preserve phase left no
	// account (Preserve nil, or Unknown).
	Preserve *pause.Report `json:"preserve,omitempty"`
	// Unaccounted is, when the preserve phase left no Preserve report (the
	// Preserver was abandoned at its hard deadline, panicked, or returned
	// none), how many sandboxes the drain's last count saw running: whether
	// any of them was preserved is unknown, and Lost counts them all. It is
	// zero when Preserve is set, and when no count succeeded (or
	// Config.Sandboxes is nil): the preserve phase still fails Err.
	Unaccounted int `json:"unaccounted,omitempty"`
	// Shortfall is by how much the time left when the preserve phase
	// started was too small for its reserve and every step's.
	Shortfall time.Duration `json:"shortfall_ns,omitempty"`
	// Cause is what began the shutdown when ServeSignals (HandleSignals,
	// Server.Run) began it: the first signal it received ("SIGTERM" from
	// the kubelet, "SIGINT" from a person), or why its ctx ended
	// (context.Cause: "context canceled" unless the caller gave a cause).
	// Empty when Shutdown was called directly.
	Cause string `json:"cause,omitempty"`
	// Signals are the signals ServeSignals received until the Report was
	// made, in order (the first 16): the first began the shutdown; a
	// SIGTERM after it is the kubelet's own (a restarted kubelet's stop,
	// which a runtime may signal again) and forced nothing; any other
	// signal forced.
	Signals  []ReceivedSignal `json:"signals,omitempty"`
	Forced   bool             `json:"forced,omitempty"`   // force mode was switched on
	ForcedAt time.Time        `json:"forced_at,omitzero"` // when Force was first called
	// Headroom is the expected SIGKILL minus End: the time the process
	// actually had left to exit (the budget's margin is what was planned).
	// Negative means the kubelet's SIGKILL would have come first.
	Headroom time.Duration `json:"headroom_ns"`
	// Events counts the Kubernetes Events posted on the pod and dropped
	// (Config.Pod); nil without a Pod.
	Events *kube.EventStats `json:"events,omitempty"`
	// PodMismatch is, when a read of the pod before the termination began
	// (at start, the pod running) found its name naming another pod or
	// none (kube.Identity.Mismatch: POD_NAME, or POD_UID, is not this
	// pod's), that read's error, unless a read since found the pod (a
	// static pod's mirror pod the kubelet made after the pod started:
	// kube.Identity.MirrorPending; the Report waits for the drain's read
	// then). The drain then took no read that found the pod gone, or
	// another in its name, for a force deletion: the budget stood. Err
	// includes it: the drain could read no deletion of its own pod.
	PodMismatch string `json:"pod_mismatch,omitempty"`
	// PodUIDUnknown is true when Config.Pod's UID was never known (no
	// kube.Config.UID, POD_UID, and no read found the pod): a read that
	// found the pod gone could not tell a force deletion, whose kubelet
	// kills 2 s after SIGTERM, from a name the API server never had, and
	// left the budget as it was.
	PodUIDUnknown bool `json:"pod_uid_unknown,omitempty"`
	// StaticPod is true when a read found the pod through its mirror pod
	// (kube.Identity.Static), or when none found any pod of its name while
	// its UID (POD_UID) is a static pod's, the kubelet's config hash
	// (kube.Identity.MirrorPending: the mirror pod not made yet, or deleted
	// and not made again): the kubelet stops a static pod only when its
	// manifest is removed, with the manifest's grace from SIGTERM, and the
	// API server shows no deletion of it. The drain took no deletion of
	// the mirror pod (a deletionTimestamp, a 404 after a force deletion),
	// and no 404 at all, for the pod's: the budget stood on the grace,
	// unless a read found another static pod's mirror pod in the name (its
	// manifest replaced under a kubelet that restarted, which stops it as
	// an orphan's: SIGKILL planned 2 s after T0, said at Warn).
	StaticPod bool `json:"static_pod,omitempty"`
}

// A ReceivedSignal is a signal ServeSignals received, and when.
type ReceivedSignal struct {
	Name string    `json:"name"` // "SIGTERM", "SIGINT", as the kernel names them
	At   time.Time `json:"at"`
}

// Phase returns the report of the named phase or step, or nil.
func (r *Report) Phase(name string) *PhaseReport {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

// Lost returns how many sandboxes were not preserved: Preserve's Lost (see
// pause.Report.Lost), or Unaccounted when the preserve phase left no
// Preserve report.
func (r *Report) Lost() int {
	if r.Preserve == nil {
		return r.Unaccounted
	}
	return r.Preserve.Lost()
}

// Err returns nil when every sandbox was preserved or vanished, the
// preserve phase and every step returned in time without error, the
// shutdown ended before the expected SIGKILL and the pod's name named this
// pod (PodMismatch empty); otherwise an error joining
// what went wrong, for a caller choosing its exit code. A drain or gate
// phase that timed out is not an error: its deadline ending it is the plan.
func (r *Report) Err() error {
	var errs []error
	switch n := r.Lost(); {
	case n > 0 && r.Preserve == nil:
		errs = append(errs, fmt.Errorf("%d sandbox(es) unaccounted for: the preserve phase left no report of the ones the drain counted", n))
	case n > 0:
		errs = append(errs, fmt.Errorf("%d sandbox(es) not preserved", n))
	}
	for _, p := range r.Phases {
		if p.fault() {
			errs = append(errs, fmt.Errorf("%s: %s: %s", p.Name, p.Result, p.Error))
		}
	}
	if r.Headroom < 0 {
		errs = append(errs, fmt.Errorf("finished %v after the expected SIGKILL", -r.Headroom))
	}
	if r.PodMismatch != "" {
		errs = append(errs, fmt.Errorf("the pod's name does not name this pod (%s or %s is wrong): no deletion of it could be read: %s", EnvPodName, EnvPodUID, r.PodMismatch))
	}
	return errors.Join(errs...)
}

// LogValue summarises the report for slog: counts, the sandboxes lost
// (up to 20, each with its outcome), headroom and every phase's result.
func (r *Report) LogValue() slog.Value {
	var attrs []slog.Attr
	if r.Cause != "" {
		attrs = append(attrs, slog.String("cause", r.Cause))
	}
	if len(r.Signals) > 1 { // the first is the cause
		names := make([]string, len(r.Signals))
		for i, s := range r.Signals {
			names[i] = s.Name
		}
		attrs = append(attrs, slog.String("signals", strings.Join(names, " ")))
	}
	attrs = append(attrs,
		slog.Time("t0", r.Budget.Start),
		slog.String("anchor", string(r.Budget.Anchor)),
		slog.Duration("headroom", r.Headroom),
		slog.Bool("forced", r.Forced),
		slog.Duration("shortfall", r.Shortfall),
	)
	if !r.Budget.Restart.IsZero() { // the kubelet ran the termination over: SIGKILL follows that run
		attrs = append(attrs, slog.Time("restart", r.Budget.Restart), slog.Duration("restart_grace", r.Budget.RestartGrace))
	}
	if r.Preserve != nil {
		attrs = append(attrs,
			slog.Int("preserved", r.Preserve.Counts[pause.Preserved]),
			slog.Int("lost", r.Preserve.Lost()),
			slog.Int("sandboxes", len(r.Preserve.Entries)))
		if r.Preserve.Lost() > 0 {
			attrs = append(attrs, slog.String("lost_sandboxes", lostIDs(r.Preserve)))
		}
		if r.Preserve.Unknown {
			attrs = append(attrs, slog.String("unknown", "no listing succeeded: "+r.Preserve.ListErr))
		}
		if r.Preserve.Incomplete {
			attrs = append(attrs, slog.String("incomplete", "no listing was complete: "+r.Preserve.ListErr))
		}
	} else if r.Unaccounted > 0 {
		attrs = append(attrs, slog.Int("lost", r.Unaccounted), slog.Int("unaccounted", r.Unaccounted))
	}
	if r.PodMismatch != "" {
		attrs = append(attrs, slog.String("pod_mismatch", clip(r.PodMismatch, maxLoggedError)))
	}
	if r.PodUIDUnknown {
		attrs = append(attrs, slog.Bool("pod_uid_unknown", true))
	}
	if r.StaticPod {
		attrs = append(attrs, slog.Bool("static_pod", true))
	}
	if p := r.Phase(PhaseGate); p != nil {
		if gd, ok := p.Detail.(*gaterefusals.Detail); ok {
			attrs = append(attrs, gateLogAttrs(gd)...)
		}
	}
	if r.Events != nil {
		attrs = append(attrs, slog.Int("events_posted", r.Events.Posted), slog.Int("events_dropped", r.Events.Dropped))
	}
	for _, p := range r.Phases {
		v := fmt.Sprintf("%s in %v", p.Result, p.Duration.Round(time.Millisecond))
		if p.fault() && p.Error != "" { // the line says why, not only the JSON
			v += ": " + clip(p.Error, maxLoggedError)
		}
		attrs = append(attrs, slog.String(p.Name, v))
	}
	return slog.GroupValue(attrs...)
}

// newGateDetail is the account r of the gate's refusals (the gate phase's
// Detail, see PhaseReport.Detail), each moment with the phase of phases
// that was running then. Its type is internal/gaterefusals', which
// internal/termmsg reads too, so that the termination message says the
// refusals as the log line does.
func newGateDetail(r refusedOps, phases []PhaseReport) *gaterefusals.Detail {
	gd := &gaterefusals.Detail{Refused: r.n, By: r.by}
	if r.n > 0 {
		gd.First, gd.FirstPhase = r.first, phaseAt(phases, r.first)
		gd.Last, gd.LastPhase = r.last, phaseAt(phases, r.last)
	}
	return gd
}

// phaseAt is the name of the last of phases to have started by t, or ""
// when none had.
func phaseAt(phases []PhaseReport, t time.Time) string {
	name := ""
	for _, p := range phases {
		if p.Start.After(t) {
			break
		}
		name = p.Name
	}
	return name
}

// gateLogAttrs are the attributes of the Report's log line that say what
// the gate refused, gd.
func gateLogAttrs(gd *gaterefusals.Detail) []slog.Attr {
	attrs := []slog.Attr{slog.Int("refused", gd.Refused)}
	if gd.Refused > 0 {
		attrs = append(attrs, slog.String("refused_by", strings.Join(gd.Kinds(), ", ")),
			slog.String("first_refused", fmt.Sprintf("%s (%s)", gd.First.Format(time.RFC3339Nano), gaterefusals.PhaseName(gd.FirstPhase))),
			slog.String("last_refused", fmt.Sprintf("%s (%s)", gd.Last.Format(time.RFC3339Nano), gaterefusals.PhaseName(gd.LastPhase))))
	}
	return attrs
}

// maxLoggedError is the most of a phase's error the Report's log line
// carries; the JSON Report has all of it.
const maxLoggedError = 300

// fault reports whether p's result is one of Err's: failed, abandoned, or a
// step (not the drain or gate wait) timed out.
func (p PhaseReport) fault() bool {
	return p.Result == Failed || p.Result == Abandoned || (p.Result == TimedOut && p.Name != PhaseDrain && p.Name != PhaseGate)
}

// clip is s cut to n bytes at most, "…" marking a cut, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// mergeSweep merges into rep.Preserve the final sweep the step p ran (its
// Detail is a *pause.Report), and posts SandboxesLost for what the sweep
// did not preserve.
func (d *Drainer) mergeSweep(rep *Report, p PhaseReport) {
	sweep, ok := p.Detail.(*pause.Report)
	if !ok || sweep == nil || sweep.Unknown || len(sweep.Entries) == 0 || rep.Preserve == nil || rep.Preserve.Unknown {
		return
	}
	mergeSweep(rep.Preserve, sweep)
	if lost := sweep.Lost(); lost > 0 {
		d.event(kube.Warning, eventSandboxesLost, p.Name, fmt.Sprintf(
			"step %s swept the sandboxes running again after the preserve phase: %s", p.Name, lostNote(sweep)))
	}
}

// mergeSweep merges a final sweep's account into the preserve phase's, so
// that the Report says what became of every sandbox at the end: one the
// phase preserved and the sweep found running again counts one more
// Relisted, with the sweep's attempts, and takes the sweep's outcome (still
// preserved when the sweep's preserve said it was already: gone, as a
// preserve again does within a Run); one the phase could not preserve
// takes the sweep's outcome too, and, when the sweep made no Preserve call
// for it, keeps the phase's error (keepWhyNotPreserved); one the
// phase never listed gets an entry, first listed by the pass after the
// phase's last. The counts are computed again.
func mergeSweep(into, sweep *pause.Report) {
	at := make(map[string]int, len(into.Entries))
	for i, e := range into.Entries {
		at[e.ID] = i
	}
	merged := make(map[string]bool, len(sweep.Entries))
	for _, e := range sweep.Entries {
		i, ok := at[e.ID]
		// Only the sweep's first entry for an ID is its account of that
		// sandbox; a later one is a flaw of its listing (the ID listed
		// twice), kept as an entry of its own as pause's Report keeps it.
		if !ok || merged[e.ID] {
			e.Pass += into.Passes
			into.Entries = append(into.Entries, e)
			continue
		}
		merged[e.ID] = true
		prior := &into.Entries[i]
		if prior.Outcome == pause.Preserved || prior.Outcome == pause.Vanished {
			e.Relisted++
		}
		if prior.Outcome == pause.Preserved && e.Outcome == pause.Vanished {
			e.Outcome, e.Error = pause.Preserved, ""
		}
		if e.Attempts == 0 && prior.Outcome.Lost() {
			keepWhyNotPreserved(&e, prior)
		}
		e.Pass = prior.Pass
		e.Attempts += prior.Attempts
		e.Relisted += prior.Relisted
		*prior = e
	}
	into.Passes += sweep.Passes
	if !sweep.Unknown && !sweep.Incomplete {
		into.Incomplete = false // a listing of the node succeeded
	}
	counts := make(map[pause.Outcome]int, len(into.Counts))
	for _, e := range into.Entries {
		counts[e.Outcome]++
	}
	into.Counts = counts
}

// keepWhyNotPreserved gives e, a sweep's entry of a sandbox it made no
// Preserve call for (not started: forced, or its time ran out first), the
// error and stack of prior, the entry of the Run before that could not
// preserve it: the last error a Preserve returned for it (an Entry's
// Error), and why it still ran. Replaced by the sweep's, the Report said
// "force mode: no new pause is sent", or nothing, where a server's answer
// to every pause had kept it running (docs/faults.md row 1941). An error
// of the sweep's that already says prior's (a step whose sweep adds it
// itself) is kept as it is.
func keepWhyNotPreserved(e *pause.Entry, prior *pause.Entry) {
	if prior.Error != "" && !strings.Contains(e.Error, prior.Error) {
		if e.Error == "" {
			e.Error = prior.Error
		} else {
			e.Error += "; not preserved before: " + prior.Error
		}
	}
	if e.Stack == "" {
		e.Stack = prior.Stack
	}
}
