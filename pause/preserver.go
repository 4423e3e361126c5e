package pause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/drainkit/drainkit/deadline"
)

// A Preserver preserves every sandbox a Lister returns, a bounded number at
// a time, before a deadline, and accounts for each one in a Report.
//
// A Preserver is safe for concurrent use; its configuration is fixed at New.
// Runs may follow each other (a preStop sweep, then the SIGTERM run); each
// Run has its own slots, and a Run is meant to have the node to itself.
type Preserver struct {
	list  Lister
	cfg   config
	tel   *telemetry
	limit atomic.Int64
	rate  byteRate // measured time per byte of a Sized sandbox's preserve
}

// New returns a Preserver over list. It fails, naming the field, when list
// is nil (or a typed nil: a nil pointer, func or map in the interface), the limit is below 1, the maximum limit is below the limit, a
// timeout or interval is negative, or an option is nil or undefined.
func New(list Lister, opts ...Option) (*Preserver, error) {
	c := config{
		newBackOff:  defaultBackOff,
		isPermanent: func(error) bool { return false },
		tp:          otel.GetTracerProvider(),
		mp:          otel.GetMeterProvider(),
		log:         slog.New(slog.DiscardHandler),
		progress:    DefaultProgressInterval,
	}
	var nilOpts []error
	for i, o := range opts {
		if o == nil {
			nilOpts = append(nilOpts, fmt.Errorf("pause: option %d is nil", i+1))
			continue
		}
		o(&c)
	}
	if c.estimator == nil {
		c.estimator = deadline.NewEstimator(DefaultEstimate)
	}
	err := errors.Join(append(nilOpts, c.validate())...)
	if isNil(list) {
		err = errors.Join(errors.New("pause: lister must not be nil"), err)
	}
	if err != nil {
		return nil, err
	}
	tel, err := newTelemetry(c.tp, c.mp)
	if err != nil {
		return nil, err
	}
	p := &Preserver{list: list, cfg: c, tel: tel}
	p.limit.Store(int64(c.limit))
	return p, nil
}

// isNil reports whether l is nil or holds a nil pointer, func, map,
// slice, channel or interface: a typed nil whose List would fail or panic
// at SIGTERM time instead of at New.
func isNil(l Lister) bool {
	if l == nil {
		return true
	}
	switch v := reflect.ValueOf(l); v.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Limit returns the current concurrency limit: the initial limit before the
// first Run; when the limit adapts, the one it has moved to, kept after the
// Run (the next Run starts from it). Use it for deadline.Work reserves.
func (p *Preserver) Limit() int { return int(p.limit.Load()) }

// Estimator returns the Estimator the Preserver feeds with every
// successful preserve's duration (see WithEstimator); never nil.
func (p *Preserver) Estimator() *deadline.Estimator { return p.cfg.estimator }

// Run preserves, in passes, every sandbox the Lister returns, and returns
// the Report.
//
// The deadline of ctx is the phase deadline: no preserve starts after it,
// and a pass waiting for a free slot gives up at it. hard is the budget's
// deadline, by which everything must be over; the zero time means the same
// as ctx's deadline, and a ctx without a deadline takes hard as its phase
// deadline. At the phase deadline (or when ctx is cancelled) running
// preserves are cancelled (CancelAtDeadline) or left to finish until hard
// (FinishInFlight). A Preserve that ignores its context is abandoned at the
// later of the two deadlines: it is reported TimedOut and Run returns, with
// that Preserve still running in its goroutine.
//
// A pass lists the sandboxes, orders the ones no earlier pass saw, and
// preserves them; Run lists again after each pass and stops when a pass
// finds nothing new or the phase deadline has passed. A failed listing is
// retried with the backoff inside the time left. A sandbox is preserved at
// most once per Run, even if a later pass lists it again: close admissions
// (drain's gate) before the Run, so that nothing resumes a preserved
// sandbox. One that was paused before the Run and resumed during it is new
// to the Run, and the next pass catches it. The Report has one entry for
// every sandbox any pass listed.
//
// Run returns by max(ctx's deadline, hard) at the latest; with neither, it
// returns when every preserve has.
func (p *Preserver) Run(ctx context.Context, hard time.Time) *Report {
	r := p.newRun(ctx, hard)
	defer r.close()
	for pass := 1; ; pass++ {
		found := r.pass(pass)
		if found == 0 || r.phaseOver() {
			break
		}
	}
	return r.finish()
}

// deadlines returns the phase deadline and the hard deadline of a Run
// called with ctx and hard; zero times mean none.
func deadlines(ctx context.Context, hard time.Time) (phase, hardline time.Time) {
	phase, ok := ctx.Deadline()
	if !ok {
		phase = hard
	}
	hardline = phase
	if hard.After(hardline) {
		hardline = hard
	}
	return phase, hardline
}

func fmtLeft(deadline time.Time) string {
	if deadline.IsZero() {
		return "none"
	}
	return fmt.Sprint(time.Until(deadline).Round(time.Millisecond))
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.Format(time.RFC3339Nano)
}
