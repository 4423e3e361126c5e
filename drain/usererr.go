package drain

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/drainkit/drainkit/internal/usererr"
	"github.com/drainkit/drainkit/pause"
)

// readableErr is err, which who (a user's code: the Lister, a step)
// returned, or, when err's Error or Unwrap would panic, an error naming
// its type that says so, and, for a typed nil, then: what became of the
// call. Such an error (a nil *T returned as an error, Go's FAQ "Why is my
// nil error value not equal to nil?"; an Error that reads a field of an
// answer that never came) is met here, in a recover: met later, by a log
// line, errors.Is or the Report on the drain's goroutine, it ended the
// process mid-drain. Pause treats its own callers' so (docs/faults.md
// rows 1881, 1882).
func readableErr(err error, who, then string) error {
	if err == nil {
		return nil
	}
	if usererr.IsNil(err) { // its methods dereference the nil: not called
		return fmt.Errorf("drain: %s returned a nil %T as its error, which is not a nil error: %s", who, err, then)
	}
	if v, _ := usererr.Panics(err); v != nil {
		return fmt.Errorf("drain: %s returned an error (%T) whose Error or Unwrap panicked: %v", who, err, v)
	}
	return err
}

// detailText is what detail, a step's Detail, says of itself when it is a
// fmt.Stringer (the ublk step's verdict per device), trimmed; "" when it
// says nothing. A String that panics (a nil *T returned beside the step's
// error, a report its step never filled) is met here, in a recover, and
// said instead: read by the step's event on the drain's goroutine, it
// ended the process after the preserve phase, the later steps not run.
func detailText(detail any) (text string) {
	s, ok := detail.(fmt.Stringer)
	if !ok {
		return ""
	}
	defer func() {
		if v := recover(); v != nil {
			text = fmt.Sprintf("its Detail (%T) panicked in String: %v", detail, v)
		}
	}()
	return strings.TrimSpace(s.String())
}

// A tightenFault keeps the first panic of a user's Tighten (a Step's, the
// Preserver's) in one phase: the phase fails naming it (fail). Tighten is
// called from the goroutines that follow the budget and Force, where no
// recover was: a Tighten that panicked (a count of moves in a map never
// made) ended the process mid-drain, every sandbox not yet preserved, the
// later steps (the ublk teardown) and the Report with it. Met in tell, in
// a recover, it is a Tighten that could not be told: the phase's context
// still ends at the moved deadline, as for a Step or Preserver with no
// Tighten. Safe for concurrent use.
type tightenFault struct{ first atomic.Pointer[error] }

// tell tells t dl (Tighten) in a recover; who names t in the error a panic
// becomes, which is logged to log and kept when it is the phase's first.
func (f *tightenFault) tell(t tightener, dl time.Time, who string, log *slog.Logger) {
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("drain: %s's Tighten (%T) panicked: %v: it was not told its deadline moved to %s",
				who, t, v, dl.UTC().Format(time.RFC3339Nano))
			log.Error("drain: a Tighten panicked: the phase ends at its moved deadline all the same, and fails", "error", err)
			f.first.CompareAndSwap(nil, &err)
		}
	}()
	t.Tighten(dl)
}

// fail marks p failed (its result kept when it is a fault already) and
// names the Tighten's panic in its Error, when there was one.
func (f *tightenFault) fail(p *PhaseReport) {
	err := f.first.Load()
	if err == nil {
		return
	}
	if !p.fault() {
		p.Result = Failed
	}
	if p.Error == "" {
		p.Error = (*err).Error()
		return
	}
	p.Error = joinNote(p.Error, (*err).Error())
}

// encodableDetail is detail, step's Detail, or, when encoding it panics (its
// MarshalJSON, or one of a value it holds: a report its step never filled),
// an error text naming its type and the panic, logged: the Report must
// encode (see Report). Encoded first outside any recover, by a Progress at
// the step's end on the drain's goroutine, or by the server writing the
// final Report, it ended the process, the later steps and the Report lost.
// A Detail that encodes with an error (a field JSON has no form for, a
// MarshalJSON that fails) is said so in its place too: kept, it made the
// whole Report fail to encode, the account of before the step kept and no
// final Report written (docs/faults.md row 2102). A *pause.Report (a final
// sweep, as large as the node) holds no user code, and is not encoded here.
func (d *Drainer) encodableDetail(detail any, step string) any {
	if _, ours := detail.(*pause.Report); ours || detail == nil {
		return detail
	}
	v, err := encodeDetail(detail)
	var said string
	switch {
	case v != nil:
		said = fmt.Sprintf("drain: step %s's Detail (%T) panicked in MarshalJSON: %v: what the step did is not in the Report", step, detail, v)
	case err != nil:
		said = fmt.Sprintf("drain: step %s's Detail (%T) could not be encoded: %v: what the step did is not in the Report", step, detail, err)
	default:
		return detail
	}
	d.log.Error("drain: a step's Detail could not be encoded: the Report says so in its place", "step", step, "error", said)
	return said
}

// encodeDetail encodes v (discarded) and returns what the encoding
// panicked with, or its error.
func encodeDetail(v any) (panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	return nil, json.NewEncoder(io.Discard).Encode(v)
}
