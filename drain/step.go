package drain

import (
	"context"
	"errors"
	"time"

	"github.com/drainkit/drainkit/deadline"
)

// A Step is one teardown action run after preservation, in the order given:
// stopping the block-device daemon, cleaning up the network, shutting down
// the API servers. A *ublk.Teardown is a Step; NewStep makes one from a
// function, and HTTPServerStep and draingrpc.Step make the usual ones.
type Step interface {
	// Phase names the step in the plan and the Report (unique, not empty,
	// and not one of "drain", "gate" or "preserve") and says what time it
	// needs: its reserve, which the phases before it leave it, and whether
	// it is critical (see deadline.Phase). It is called once, by New.
	Phase() deadline.Phase
	// Run does the work within ctx's deadline (the step's window from the
	// plan) and returns what it did, which the Report carries as the step's
	// Detail (JSON-marshalable, or nil). A Run that has not returned
	// shortly after ctx ends is abandoned and reported Abandoned; the next
	// step runs anyway.
	//
	// The window can end earlier than ctx's deadline: when the budget moves
	// SIGKILL earlier while the step runs (a read of the pod's deletion
	// with a shorter grace, a restarted kubelet calling the hook again),
	// ctx is cancelled at the step's new deadline, and when Force is called
	// while it runs, its Reserve from then (a step that begins after Force
	// has that as ctx's deadline). A Step that also has the method
	// Tighten(deadline time.Time) bool, as *ublk.Teardown, is told that
	// deadline first, from another goroutine, while Run runs: a Run
	// that plans its work inside ctx's deadline (a last stage kept for its
	// end) lays it out again there. Tighten must be safe for concurrent use
	// with Run, move the deadline only earlier, and do nothing with no Run
	// in progress; its result is not used. ctx's Deadline reports the
	// moved deadline from the moment before Tighten is called: a Run that
	// makes itself reachable by Tighten before it reads ctx's deadline (as
	// *ublk.Teardown's does) misses no move, one landing as Run begins
	// included.
	//
	// A Run that preserves sandboxes itself returns its *pause.Report as
	// the Detail: a final sweep, when the server admits resumes or creates
	// until its own shutdown, which a step starts, so that a sandbox can
	// run again after the preserve phase's last listing. The Drainer merges
	// it into Report.Preserve before the Report is logged or posted (see
	// Report.Preserve), so the log line, DrainFinished, Report.Err and the
	// caller's exit status count what the sweep could not preserve. Its
	// error should say so too: the step then fails.
	Run(ctx context.Context) (any, error)
}

// NewStep returns a Step with the given phase that calls run.
func NewStep(phase deadline.Phase, run func(ctx context.Context) (any, error)) Step {
	return funcStep{phase: phase, run: run}
}

type funcStep struct {
	phase deadline.Phase
	run   func(ctx context.Context) (any, error)
}

func (s funcStep) Phase() deadline.Phase                { return s.phase }
func (s funcStep) Run(ctx context.Context) (any, error) { return s.run(ctx) }

// ErrForced is the cause of a phase context cancelled by force mode.
var ErrForced = errors.New("drain: forced")

// returnSlack is how long a step (or the preserver) may take to return after
// its context ended before it is abandoned: a cooperative Run returns within
// it, so it is reported with its own error rather than as abandoned.
const returnSlack = 100 * time.Millisecond
