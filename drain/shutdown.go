package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/pause"
)

// Shutdown takes the node through the rest of its termination and returns
// the Report. It is single-flight: the first call runs the shutdown, later
// and concurrent calls wait for it and get the same Report.
//
// Shutdown treats its first call as the arrival of SIGTERM: it calls
// Budget.OnSIGTERM, which refines the expected SIGKILL with the kubelet's
// arithmetic (or anchors T0 now when no preStop hook ran), and ends the
// preStop wait. Then, in order:
//
//  1. gate: closes the gate if the preStop did not, and waits for admitted
//     operations of gated classes to finish, at most InFlightWait and never
//     past the drain phase's deadline;
//  2. preserve: runs the Preserver under the preserve phase's context (the
//     budget's deadline minus every step's reserve), with the budget's
//     deadline as its hard deadline, or, when a step is Critical, the
//     moment the first critical step must start;
//  3. every Step in order, each under its phase's context (the budget's
//     deadline minus the reserves of the steps after it), even when
//     preservation partly failed or an earlier step failed. A step that has
//     not returned shortly after its deadline is abandoned, still running,
//     and reported Abandoned.
//
// When the time left is smaller than the reserves of the phases still to
// run (the kubelet's 2 s after an overrunning hook), it is shared among them
// in proportion to their reserves, so every phase still runs; the Report
// says which reserves were short.
//
// Force (or cancelling ctx, or a second signal with HandleSignals) stops
// the remaining waits: the gate wait ends, the Preserver starts no new
// preserve (in-flight ones end as its in-flight policy says), and each step
// not yet finished gets only its Reserve. Every phase ends by the budget's
// deadline, so Shutdown returns by then unless steps are abandoned, each of
// which costs at most a moment more.
//
// The Report is logged once through the Logger; each phase is a span.
// Shutdown never exits the process: the caller decides the exit code, for
// example from Report.Err.
func (d *Drainer) Shutdown(ctx context.Context) *Report {
	stop := context.AfterFunc(ctx, d.Force)
	defer stop()
	d.mu.Lock()
	first := !d.started
	d.started = true
	d.mu.Unlock()
	if first {
		d.budget.OnSIGTERM(time.Now())
		d.termStop()
		d.finish(d.run(context.WithoutCancel(ctx)))
	}
	<-d.done
	return d.report
}

func (d *Drainer) finish(rep *Report) {
	d.mu.Lock()
	d.report = rep
	d.mu.Unlock()
	close(d.done)
}

func (d *Drainer) run(ctx context.Context) *Report {
	ctx, span := d.tracer.Start(ctx, "drain.shutdown")
	defer span.End()
	rep := &Report{Start: time.Now()}

	d.mu.Lock()
	run := d.prestop
	d.mu.Unlock()
	if run != nil {
		t := time.NewTimer(2 * returnSlack) // ends at once: Shutdown started; count gives up within returnSlack
		select {
		case <-run.done:
		case <-t.C:
		}
		t.Stop()
		sum := run.summary()
		rep.PreStop = &sum
		rep.Phases = append(rep.Phases, PhaseReport{Name: PhaseDrain, Start: sum.Start, End: sum.End,
			Deadline: sum.DrainDeadline, Duration: sum.Waited, Result: drainResult(sum.Reason), Error: sum.Reason})
	}

	d.phase(ctx, rep, PhaseGate, 0, d.gatePhase)
	// Count the running sandboxes once more, so the preserve reserve is
	// known even when no preStop counted them.
	d.count(ctx, d.budget.Deadline())
	rep.Shortfall = d.shortfall()
	d.phase(ctx, rep, PhasePreserve, 1, func(ctx context.Context, p *PhaseReport) {
		d.preservePhase(ctx, rep, p)
	})
	for i, s := range d.steps {
		d.phase(ctx, rep, s.Name, 2+i, func(ctx context.Context, p *PhaseReport) { d.stepPhase(ctx, s, p) })
	}

	rep.End = time.Now()
	rep.Budget = d.budget.State()
	rep.Margin = rep.Budget.Kill.Sub(rep.End)
	d.mu.Lock()
	rep.ForcedAt = d.forcedAt
	d.mu.Unlock()
	rep.Forced = !rep.ForcedAt.IsZero()
	d.margin.Record(ctx, rep.Margin.Seconds())
	span.SetAttributes(attribute.Float64("drain.margin_s", rep.Margin.Seconds()), attribute.Int("drain.lost", rep.Lost()))
	level := slogLevel(rep)
	d.log.Log(ctx, level, "drain: shutdown finished", "report", rep)
	return rep
}

func drainResult(reason string) Result {
	if reason == ReasonDrained {
		return OK
	}
	return TimedOut
}

// phase runs one phase under its own span and appends its PhaseReport.
// index is the phase's place in the plan (0 for the gate phase, which has
// no window of its own and sets its deadline itself).
func (d *Drainer) phase(ctx context.Context, rep *Report, name string, index int,
	fn func(context.Context, *PhaseReport)) {
	ctx, span := d.tracer.Start(ctx, "drain."+name, trace.WithAttributes(attribute.String("drain.phase", name)))
	defer span.End()
	p := PhaseReport{Name: name, Start: time.Now()}
	if index > 0 {
		p.Deadline, p.Reserve = d.phaseDeadline(index)
		p.Short = max(p.Reserve-max(p.Deadline.Sub(p.Start), 0), 0)
	}
	fn(ctx, &p)
	p.End = time.Now()
	p.Duration = p.End.Sub(p.Start)
	p.Forced = d.force.Err() != nil
	d.phaseDur.Record(ctx, p.Duration.Seconds(), metric.WithAttributes(attribute.String("drain.phase", name)))
	span.SetAttributes(attribute.String("drain.result", string(p.Result)))
	if p.Result != OK {
		span.SetStatus(codes.Error, p.Error)
	}
	rep.Phases = append(rep.Phases, p)
}

// phaseDeadline returns the deadline and reserve of the plan's phase i, as
// of now: the plan's deadline (the budget's deadline minus the reserves of
// the later phases) while the time left covers the reserves of this phase
// and the later ones. When it does not (the kubelet's 2 s after an
// overrunning hook), the time left is shared in proportion to the
// reserves, so every phase still gets a part of it instead of the earlier
// ones getting none.
func (d *Drainer) phaseDeadline(i int) (time.Time, time.Duration) {
	ws := d.plan.Windows()
	now, end := time.Now(), d.budget.Deadline()
	left := end.Sub(now)
	var rest time.Duration
	for _, w := range ws[i:] {
		rest += w.Reserve
	}
	if rest <= left || left <= 0 {
		return ws[i].Deadline, ws[i].Reserve
	}
	share := time.Duration(float64(left) * float64(ws[i].Reserve) / float64(rest))
	return now.Add(share), ws[i].Reserve
}

// shortfall is by how much the reserves of the preserve phase and the steps
// exceed the time left before the budget's deadline.
func (d *Drainer) shortfall() time.Duration {
	var rest time.Duration
	for _, w := range d.plan.Windows()[1:] {
		rest += w.Reserve
	}
	return max(rest-d.budget.Remaining(), 0)
}

// forceCancel returns ctx cancelled with ErrForced when Force is called.
func (d *Drainer) forceCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(d.force, func() { cancel(ErrForced) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}

func (d *Drainer) gatePhase(ctx context.Context, p *PhaseReport) {
	d.gate.Close()
	p.Deadline = d.plan.Deadline(PhaseDrain)
	if bound := time.Now().Add(d.inflight); bound.Before(p.Deadline) {
		p.Deadline = bound
	}
	ctx, cancel := context.WithDeadline(ctx, p.Deadline)
	defer cancel()
	ctx, unforce := d.forceCancel(ctx)
	defer unforce()
	if err := d.gate.Wait(ctx); err != nil {
		p.Result, p.Error = TimedOut, fmt.Sprintf("gated operations still in flight: %v", context.Cause(ctx))
		return
	}
	p.Result = OK
}

func (d *Drainer) preservePhase(ctx context.Context, rep *Report, p *PhaseReport) {
	ctx, cancel := context.WithDeadline(ctx, p.Deadline)
	defer cancel()
	ctx, unforce := d.forceCancel(ctx)
	defer unforce()
	hard := d.hardDeadline(p.Deadline)
	// runBounded waits for the Preserver until hard, not the phase deadline:
	// in-flight preserves may finish until hard.
	hctx, hcancel := context.WithDeadline(context.WithoutCancel(ctx), hard)
	defer hcancel()
	var pr *pause.Report // written by the goroutine, read only once it returned
	err := runBounded(hctx, func(context.Context) error {
		pr = d.preserver.Run(ctx, hard)
		return nil
	})
	if err == nil {
		rep.Preserve = pr
	}
	switch {
	case errors.Is(err, errAbandoned):
		p.Result, p.Error = Abandoned, "the Preserver did not return by the hard deadline"
	case err != nil:
		p.Result, p.Error = Failed, err.Error()
	case rep.Preserve == nil:
		p.Result, p.Error = Failed, "the Preserver returned no report"
	case rep.Preserve.Err() != nil: // sandboxes lost, or unknown: no listing succeeded
		p.Result, p.Error = Failed, rep.Preserve.Err().Error()
	default:
		p.Result = OK
	}
}

// hardDeadline is when preserves still in flight after the preserve phase's
// deadline (soft) are abandoned: the budget's deadline, or the start of the
// first Critical step's window, whichever is earlier, but never before soft.
func (d *Drainer) hardDeadline(soft time.Time) time.Time {
	hard := d.budget.Deadline()
	for i, s := range d.steps {
		if s.Critical {
			// The phase before step i is plan phase 1+i; its deadline is
			// where step i's window (and its reserve) begins.
			hard = d.plan.Windows()[1+i].Deadline
			break
		}
	}
	if hard.Before(soft) {
		return soft
	}
	return hard
}

func (d *Drainer) stepPhase(ctx context.Context, s Step, p *PhaseReport) {
	ctx, cancel := context.WithDeadline(ctx, p.Deadline)
	defer cancel()
	ctx, unforce := d.forceReserve(ctx, s.Reserve)
	defer unforce()
	err := runBounded(ctx, s.Run)
	switch {
	case err == nil:
		p.Result = OK
	case errors.Is(err, errAbandoned):
		p.Result, p.Error = Abandoned, err.Error()
	case ctx.Err() != nil:
		p.Result, p.Error = TimedOut, fmt.Sprintf("%v (%v)", err, context.Cause(ctx))
	default:
		p.Result, p.Error = Failed, err.Error()
	}
}

// forceReserve returns ctx cancelled with ErrForced reserve after Force is
// called (at once if it already was): in force mode a step gets only its
// reserve.
func (d *Drainer) forceReserve(ctx context.Context, reserve time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	timers := make(chan *time.Timer, 1)
	stop := context.AfterFunc(d.force, func() {
		timers <- time.AfterFunc(reserve, func() { cancel(ErrForced) })
	})
	return ctx, func() {
		if !stop() {
			select {
			case t := <-timers:
				t.Stop()
			default: // the AfterFunc is running; its timer fires into a dead ctx
			}
		}
		cancel(context.Canceled)
	}
}
