package pause

import (
	"errors"
	"fmt"
	"time"
)

// An Outcome is what happened to one sandbox during a Run.
type Outcome string

// The outcomes a Report can hold. Every sandbox any pass listed gets exactly
// one.
const (
	// Preserved: Preserve returned nil.
	Preserved Outcome = "preserved"
	// Failed: Preserve returned a permanent error, or transient errors until
	// no retry fitted in the time left, or panicked.
	Failed Outcome = "failed"
	// TimedOut: Preserve was running when its bound or the deadline came.
	TimedOut Outcome = "timed_out"
	// NotStarted: its turn never came before the deadline.
	NotStarted Outcome = "not_started"
	// Vanished: Preserve returned ErrGone: the sandbox was already gone or
	// already preserved when its turn came.
	Vanished Outcome = "vanished"
)

// Lost reports whether a sandbox with this outcome is lost at SIGKILL:
// neither preserved nor vanished.
func (o Outcome) Lost() bool { return o != Preserved && o != Vanished }

// An Entry is the account of one sandbox.
type Entry struct {
	ID       string        `json:"id"`                    // the sandbox's ID
	Outcome  Outcome       `json:"outcome"`               // what happened to it
	Pass     int           `json:"pass"`                  // the pass that first listed it, from 1; 0 when only the drain's count listed it
	Attempts int           `json:"attempts"`              // Preserve calls made, across its preserves
	Start    time.Time     `json:"start,omitzero"`        // first attempt (of its last preserve)
	End      time.Time     `json:"end,omitzero"`          // when the outcome was decided
	Duration time.Duration `json:"duration_ns"`           // End - Start, zero if never started
	Error    string        `json:"error,omitempty"`       // last error; of an attempt cut by its deadline after failed ones, with the failure before it
	Stack    string        `json:"stack,omitempty"`       // set when Preserve panicked
	Priority int           `json:"priority,omitempty"`    // from Prioritized
	Estimate time.Duration `json:"estimate_ns,omitempty"` // its own (Estimated), or its size at the rate known when its pass was ordered
	Size     int64         `json:"size_bytes,omitempty"`  // from Sized
	// Relisted counts the later passes that listed it again after it was
	// preserved (or vanished): it was resumed during the Run, or the
	// listing lagged its pause. Each time it was preserved again, and
	// Outcome, Start and Duration are those of its last preserve (no
	// Start or Duration when that one never started).
	Relisted int `json:"relisted,omitempty"`
}

// String is the entry as the lines that name lost sandboxes show it: its
// ID and outcome, "sb-7(failed)", and "(no ID)(failed)" for a sandbox the
// server listed without an ID (a flawed listing element).
func (e Entry) String() string {
	id := e.ID
	if id == "" {
		id = "(no ID)"
	}
	return id + "(" + string(e.Outcome) + ")"
}

// Abandoned reports whether the Preserver gave up waiting for e's last
// Preserve: it ignored its context past the hard deadline, or past its
// Config.SandboxTimeout and the slack after it (a hang), and had not
// returned when Run made the Report (one that returned before is reported
// as it returned). Its Outcome is TimedOut; its Duration is how long it
// was waited for, which says nothing of how long a preserve takes. It
// holds for an Entry read back from a Report's JSON too.
func (e Entry) Abandoned() bool { return e.Outcome == TimedOut && e.Error == errAbandoned.Error() }

// A Report accounts for every sandbox a Run saw. It is JSON-marshalable.
type Report struct {
	Start    time.Time       `json:"start"`         // when Run started
	End      time.Time       `json:"end"`           // when Run returned
	Deadline time.Time       `json:"deadline"`      // the phase deadline (as a Tighten before it moved it): no preserve started after it
	Hard     time.Time       `json:"hard,omitzero"` // in-flight preserves were abandoned at it
	Passes   int             `json:"passes"`        // listing passes made
	Limit    int             `json:"limit"`         // the concurrency limit at the end
	Counts   map[Outcome]int `json:"counts"`        // entries by outcome
	Entries  []Entry         `json:"entries"`       // one per sandbox, in the order first listed
	// ListErr is the last listing error (also of one that returned
	// sandboxes); a listing cut by the Run's end, made again after one
	// that failed, names that one's error too.
	ListErr string `json:"list_error,omitempty"`
	// Unknown is true when no listing succeeded: the Run never learned
	// which sandboxes the node has, so no count in the Report means
	// anything. Err says so, with ListErr.
	Unknown bool `json:"unknown,omitempty"`
	// Incomplete is true when no listing succeeded but failed ones gave
	// sandboxes (a paginated listing whose later page failed; see
	// Lister): the Report accounts for those, and the node may have more
	// that no listing reached. Err says so, with ListErr. Unknown and
	// Incomplete are never both set.
	Incomplete bool `json:"incomplete,omitempty"`
	// LearnedLimit is the limit this Run measured fastest: set when the
	// limit adapted and the Run decided epochs at two limits at least, so
	// that it compared them; zero for a fixed limit or a Run too short to
	// decide. Unlike Limit, it is never a probe, nor a start that measured
	// nothing. It is what the node's next drain may start from:
	// Config{Limit: LearnedLimit, MaxLimit: the same ceiling}.
	LearnedLimit int `json:"learned_limit,omitempty"`
}

// Lost returns the number of sandboxes that were not preserved and did not
// vanish: the ones a SIGKILL would take.
func (r *Report) Lost() int {
	return r.Counts[Failed] + r.Counts[TimedOut] + r.Counts[NotStarted]
}

// Err returns nil when a listing succeeded and every sandbox listed was
// preserved or vanished; otherwise an error saying what went wrong: no
// listing succeeded (the sandboxes are unknown, or, when failed listings
// gave some, the node may have more; with the last listing error), or how
// many sandboxes were lost.
func (r *Report) Err() error {
	var errs []error
	if r.Unknown {
		errs = append(errs, fmt.Errorf("pause: no listing succeeded, the node's sandboxes are unknown: %s", r.ListErr))
	}
	if r.Incomplete {
		errs = append(errs, fmt.Errorf("pause: no listing was complete, the node may have sandboxes the %d listed do not include: %s", len(r.Entries), r.ListErr))
	}
	if n := r.Lost(); n > 0 {
		errs = append(errs, fmt.Errorf("pause: %d of %d sandboxes not preserved", n, len(r.Entries)))
	}
	return errors.Join(errs...)
}
