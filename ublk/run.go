package ublk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/kernelrel"
	"github.com/drainkit/drainkit/internal/ublkctl"
)

// run is the state of one Teardown.Run.
type run struct {
	t   *Teardown
	cfg *config
	ctx context.Context
	rep *Report
	dev []*devState

	start        time.Time
	stages       // the run's own copy of the layout: adopt takes a moved one
	requestedAt  time.Time
	exitWaitFrom time.Time // when the daemon's ExitWait started

	// mu guards what Tighten, from another goroutine, shares with the
	// run: the latest layout (planned, laid out again by tighten), the
	// stage the run is in, the contexts bounded by a stage's end, and the
	// moves the run has not yet adopted. moved wakes a sleep.
	//
	// stage is written by the run's goroutine alone (enter), under mu,
	// which tighten holds to read it; the run's goroutine reads it
	// without mu (stageEnd), since no other goroutine writes it. The
	// other fields mu guards are written by both and always under it.
	mu      sync.Mutex
	planned stages
	stage   int
	bounds  map[*bound]struct{}
	moves   []move
	moved   chan struct{}

	exited     chan struct{} // closed when the daemon has exited
	waiterDone chan struct{}
	stopWaiter context.CancelFunc
	waitErr    error // the exit watcher's failure, not ctx's end: read once waiterDone is closed

	held        map[int][]Holder
	stoppedHeld map[int][]Holder        // devices the last resort stopped under holders (stopUnderHolders)
	lastHeld    map[int][]Holder        // what the last holders scan found, or kept (see notRead)
	devNums     map[blockdev.DevNum]int // every disk and partition number scanned, to its device ID
	others      map[int]uint64          // another server's devices left alone, to their char entry (charEntry)
	waiting     bool                    // past discovery: refresh looks for devices added since (findNew)
	ctl         ublkctl.Controller
	ctlErr      error // opening the control device failed
	killed      bool
	causes      []error
	unconfirmed error // the stop request's ErrUnconfirmed, taken as delivered
	// blind is why the last look for disks the daemon serves beyond the
	// step's could not read sysfs (nil once one did), blindSince when the
	// first such look was (see cannotTell).
	blind      error
	blindSince time.Time
}

// stages are the times the run's stages end, laid out inside the step's
// deadline by plan, and again from now by tighten when the deadline moves
// earlier.
type stages struct {
	deadline                        time.Time       // zero: none
	holderUntil, fallbackAt, killAt time.Time       // zero: never
	lastResort                      deadline.Window // its Deadline is zero without a deadline: it never runs
}

// The run's stages, in order, as plan lays them out: the holder wait
// (discovery too), the last resort, the daemon's own stop (the request and
// the wait for it), the control fallback, the kill. pastKill is the run
// once the daemon was killed: no stage is left to lay out.
const (
	inHolders = iota
	inLastResort
	inStop
	inControl
	inKill
	pastKill
)

// A move is the deadline moved earlier by Tighten, adopted by the run into
// its Report.
type move struct {
	at, from, to time.Time
}

// errDeadlineMoved ends a command or a wait bounded by a stage's end when
// Tighten moved that end before the one it had.
var errDeadlineMoved = errors.New("ublk: the step's deadline moved earlier")

// A bound is a context of the run that ends at a stage's end (end), as
// Tighten moves it: was is the end it is armed for.
type bound struct {
	end    func(*stages) time.Time
	was    time.Time
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

type devState struct {
	rep      *DeviceReport
	cur      Device
	inflight Inflight // last read while the disk existed
	gone     bool     // seen gone from sysfs: for good, its ID's next device is another's
	// seen is true once a read found the device in sysfs. A listed
	// device not there yet (Config.Devices: its daemon adds it a moment
	// later) is read again every poll until it is, not taken for gone:
	// the daemon was killed with it live.
	seen bool
	// readAt is when sysfs was last read for the device, readErr why the
	// reads since failed (nil when the last one did not): its state is
	// then that of readAt, which the Report says.
	readAt  time.Time
	readErr error
	entry   uint64 // its char device's sysfs entry (charEntry), 0 when not read
	stopped bool   // STOP_DEV completed through the control device
	// fellBack is true once a control fallback with the daemon running
	// has looked at the device: a device found live after one (added
	// since, or a listed one seen late) is looked at by one of its own.
	// A disk servesMore found the daemon serving beyond the step's is
	// not the fallback's to stop while the daemon runs: true from the
	// start.
	fellBack bool
	dead     bool // GET_DEV_INFO said DEAD: stopped, nothing in flight
	// draining is true for a disk the daemon serves beyond the step's,
	// found with its disk gone from sysfs and the driver not saying DEAD
	// (servesMore): a STOP_DEV not the step's draining its I/O in flight.
	// No fallback looks at it, so stopSeen asks the driver each poll.
	draining bool
	deleted  bool // DEL_DEV completed through the control device
	// delDevWithheld is true when the control sent no DEL_DEV because the
	// kernel's waits under its global lock (delDevWaitsLocked): a device
	// stopped so is done, though its char device and ID stay.
	delDevWithheld bool
	// pending are the control commands sent for the device whose
	// completion was not seen before their window ended: the driver runs
	// them on (see pendingNow).
	pending []string
	// untold says why the device is not known to be the daemon's (the
	// pass that tells another server's ended before it told this one);
	// "" once a pass tells it the daemon's, and never for one told
	// another server's, which keeps it as it leaves the step. The step
	// waits for it and asks its daemon, which stops its own alone, but
	// the control never stops or deletes it: its users ask controlled for
	// their devices (see retell).
	untold string
}

// pendingNow returns the commands sent for d still not known complete: a
// STOP_DEV until the device is known stopped, a DEL_DEV while it is in
// sysfs.
func (d *devState) pendingNow() []string {
	var out []string
	for _, name := range d.pending {
		switch {
		case !d.cur.Present():
		case name == "STOP_DEV" && (d.stopped || d.dead):
		case slices.Contains(out, name):
		default:
			out = append(out, name)
		}
	}
	return out
}

// live reports whether the device may still have block I/O that only the
// daemon can complete, so that killing the daemon is unsafe on a
// vulnerable kernel. The disk leaving sysfs is not enough: the kernel
// removes /sys/block/ublkbN at the start of STOP_DEV, before it has waited
// for the requests in flight. Only a device that is gone entirely (DEL_DEV
// follows STOP_DEV), or whose STOP_DEV we saw complete, or that the driver
// reports DEAD, is known not to be live, and only while sysfs shows no
// disk: a disk is there only once START_DEV has made one, so a device
// with one is live whatever the driver said before (DEAD before its
// daemon started it: the daemon was killed with it live).
func (d *devState) live() bool { return d.cur.Present() && (d.cur.Disk || !d.stopped && !d.dead) }

// drained reports whether the device's in-flight I/O is known to be over.
func (d *devState) drained() bool { return !d.live() }

func newRun(ctx context.Context, t *Teardown) *run {
	now := time.Now()
	r := &run{t: t, cfg: &t.cfg, ctx: ctx, start: now, moved: make(chan struct{}, 1)}
	r.rep = &Report{Kernel: t.release, KernelClass: t.class, KernelDecision: t.decision, Start: now, Devices: []DeviceReport{}, Steps: []StepResult{}}
	r.rep.Daemon.Present = t.cfg.daemon != nil
	if t.classErr != nil {
		r.rep.Note = "kernel release not recognised, treated as vulnerable: " + t.classErr.Error()
	}
	return r
}

// plan places the step's stages inside ctx's deadline with the plan's
// rule (deadline.Split): the holder wait runs until the last-resort point,
// the last resort, the daemon's own stop, the control fallback and the
// kill need their reserves; when the window is shorter than those
// reserves, the four share it in proportion. The step does no time
// arithmetic of its own on its window. A deadline Tighten moved before
// plan ran (the run is Tighten's from its start) stands when it is the
// earlier one.
func (r *run) plan() {
	r.mu.Lock()
	defer r.mu.Unlock()
	dl, ok := r.ctx.Deadline()
	for i := range r.moves {
		if r.moves[i].from.IsZero() {
			r.moves[i].from = dl
		}
	}
	switch {
	case len(r.moves) > 0 && (!ok || r.planned.deadline.Before(dl)):
	case ok:
		r.planned = r.layout(r.start, dl, inHolders, stages{})
		r.moves = nil
	case r.cfg.holderWait > 0:
		r.planned.holderUntil = r.start.Add(r.cfg.holderWait)
	}
	r.stages = r.planned
	r.rep.Deadline = r.planned.deadline
}

// layout lays out, from from to the deadline dl, the stages from stage on
// with plan's rule; the ones before it are over, and keep cur's ends,
// none later than from. The holder wait keeps its end at start +
// HolderWait at most: one already past it is over.
func (r *run) layout(from, dl time.Time, stage int, cur stages) stages {
	phases := []deadline.Phase{
		{Name: "holders", Max: r.cfg.holderWait},
		{Name: "last resort", Reserve: deadline.Fixed(r.cfg.lastResortReserve), Critical: true},
		{Name: "stop", Reserve: deadline.Fixed(r.cfg.stopReserve), Critical: true},
		{Name: "control", Reserve: deadline.Fixed(r.cfg.controlReserve), Critical: true},
		{Name: "kill", Reserve: deadline.Fixed(r.cfg.killReserve), Critical: true},
	}
	if stage == inHolders && r.cfg.holderWait > 0 {
		if left := r.start.Add(r.cfg.holderWait).Sub(from); left > 0 {
			phases[0].Max = left
		} else {
			stage = inLastResort
		}
	}
	out := cur
	out.deadline = dl
	ends := []*time.Time{&out.holderUntil, &out.lastResort.Deadline, &out.fallbackAt, &out.killAt}
	for _, end := range ends[:min(stage, len(ends))] {
		if end.IsZero() || end.After(from) {
			*end = from
		}
	}
	if stage >= len(ends) {
		return out
	}
	for i, w := range deadline.Split(from, dl, phases[stage:]...)[:len(ends)-stage] {
		if stage+i == inLastResort {
			out.lastResort = w
		} else {
			*ends[stage+i] = w.Deadline
		}
	}
	return out
}

// enter records that the run is in stage now: a deadline that moves
// later lays out the stages from there on.
func (r *run) enter(stage int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stage = max(r.stage, stage)
}

// tighten moves the run's deadline earlier, to dl, and lays out again
// from now the stages not yet over (see Teardown.Tighten); it reports
// whether it moved it.
func (r *run) tighten(dl time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.planned.deadline
	if !was.IsZero() && !dl.Before(was) {
		return false
	}
	now := time.Now()
	r.planned = r.layout(now, dl, r.stage, r.planned)
	r.moves = append(r.moves, move{at: now, from: was, to: dl})
	for b := range r.bounds {
		b.arm(&r.planned)
	}
	select { // the run's sleep wakes and adopts it
	case r.moved <- struct{}{}:
	default:
	}
	r.cfg.logger.WarnContext(r.ctx, "ublk: the step's deadline moved earlier: its stages are laid out again", "deadline", dl, "was", was)
	return true
}

// adopt takes the layout tighten made, when it made one since the last
// adopt, and says so in the Report; it reports whether it took one. Only
// the run's goroutine reads r.stages, so each of its stages sees a
// layout that does not change under it.
func (r *run) adopt() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	select { // this adopt takes what the token would wake a sleep for
	case <-r.moved:
	default:
	}
	if len(r.moves) == 0 {
		return false
	}
	r.stages = r.planned
	r.rep.Deadline = r.planned.deadline
	for _, m := range r.moves {
		was := "none"
		if !m.from.IsZero() {
			was = m.from.Format(time.RFC3339Nano)
		}
		r.rep.Steps = append(r.rep.Steps, StepResult{Name: "deadline moved", Start: m.at,
			Result: "from " + was + " to " + m.to.Format(time.RFC3339Nano) + ": the stages not over laid out again from then"})
	}
	r.moves = nil
	return true
}

// stageCtx returns parent ending at a stage's end (end; zero: none), as
// Tighten moves it: a stop request, a control command, a scan running
// when the deadline moves earlier ends at the stage's new end, and the
// stages after it keep their time.
func (r *run) stageCtx(parent context.Context, end func(*stages) time.Time) (context.Context, context.CancelFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancelAt := parent, context.CancelFunc(func() {})
	was := end(&r.planned)
	if !was.IsZero() {
		ctx, cancelAt = context.WithDeadline(parent, was)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	b := &bound{end: end, was: was, cancel: cancel}
	if r.bounds == nil {
		r.bounds = map[*bound]struct{}{}
	}
	r.bounds[b] = struct{}{}
	return ctx, func() {
		r.mu.Lock()
		delete(r.bounds, b)
		if b.timer != nil {
			b.timer.Stop()
		}
		r.mu.Unlock()
		cancel(context.Canceled)
		cancelAt()
	}
}

// arm ends b's context at its stage's end in s, if that is earlier than
// the one it has.
func (b *bound) arm(s *stages) {
	at := b.end(s)
	if at.IsZero() || !b.was.IsZero() && !at.Before(b.was) {
		return
	}
	b.was = at
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timer = time.AfterFunc(time.Until(at), func() { b.cancel(errDeadlineMoved) })
}

// The stages' ends, for stageCtx.
func holderEnd(s *stages) time.Time     { return s.killFloor() }
func lastResortEnd(s *stages) time.Time { return s.lastResort.Deadline }
func fallbackEnd(s *stages) time.Time   { return s.fallbackAt }
func killEnd(s *stages) time.Time       { return s.killAt }

func (r *run) do() error {
	defer r.close()
	if err := r.discover(); err != nil {
		r.rep.Verdict = VerdictNotStopped
		r.rep.Duration = time.Since(r.start)
		return err
	}
	if why := r.nothingToDo(); why != "" {
		r.rep.Verdict, r.rep.Note = VerdictNothingToDo, joinNote(r.rep.Note, why)
		r.rep.Daemon.Exited = r.cfg.daemon != nil
		r.rep.Duration = time.Since(r.start)
		return nil
	}
	held := r.waitHolders()
	r.enter(inLastResort)
	r.adopt()
	if held != nil {
		switch {
		case r.cfg.stopDespite:
			r.cfg.logger.WarnContext(r.ctx, "ublk: stopping the daemon although devices are still open", "holders", fmt.Sprint(held))
		case r.t.LastResort() && !r.t.class.MayKillWithLiveDevices() && !r.lastResort.Deadline.IsZero() && r.ctx.Err() == nil: // no deadline: no SIGKILL to get ahead of
			held = r.runLastResort(held)
		}
		held = r.setAsidePossible(held)
		if held != nil && !r.cfg.stopDespite {
			r.held = held
			r.finish()
			return r.withStoppedHeld(&HeldError{Holders: held})
		}
	}
	r.enter(inStop)
	r.adopt()
	r.requestStop()
	r.waitLoop()
	return r.withStoppedHeld(r.finish())
}

// nothingToDo says why the step has nothing to do ("" when it has): no
// device of its own at discovery, and no daemon, or one that is not
// running, looked at once (a process that exited, a socket no server
// listens on: the daemon a server is wired for does not run on this
// node), which a stop request would not reach. It names a node without
// the ublk module. A daemon that runs is asked to stop all the same, with
// no device: it may be adding one. Before, a daemon that was not running
// was sent the request all the same, and the Report said VerdictStopped,
// the daemon "stopped and deleted the device", with no note.
func (r *run) nothingToDo() string {
	if len(r.dev) > 0 {
		return ""
	}
	why := "no ublk devices"
	if loaded, err := exists(filepath.Join(r.cfg.sysRoot, charClassDir)); err == nil && !loaded {
		why += " (no " + charClassDir + " in sysfs: the ublk_drv module is not loaded)"
	}
	switch {
	case r.cfg.daemon == nil:
		return why + " and no daemon"
	case !r.daemonKnownGone():
		return ""
	}
	return why + ", and the daemon is not running: nothing to ask it (any device it served was gone before the step looked)"
}

// daemonKnownGone reports whether the daemon is known to have exited, so
// that a stop request would reach nothing: daemonGone, but for a
// DaemonFuncs with no WaitFunc, whose Wait says it exited whatever it does.
func (r *run) daemonKnownGone() bool {
	return !exitedAlways(r.cfg.daemon) && r.daemonGone()
}

// exitedAlways reports whether d is a DaemonFuncs with no WaitFunc, whose
// Wait says the daemon exited whatever it does.
func exitedAlways(d Daemon) bool {
	switch f := d.(type) {
	case DaemonFuncs:
		return f.WaitFunc == nil
	case *DaemonFuncs:
		return f != nil && f.WaitFunc == nil
	}
	return false
}

// withStoppedHeld adds to err, when the last resort stopped devices under
// holders, the *StoppedHeldError that says so: their holders lost the
// disk, a fault even when every device went. One whose STOP_DEV is still
// not seen complete is named as sent, not stopped (row 1303).
func (r *run) withStoppedHeld(err error) error {
	if r.stoppedHeld == nil {
		return err
	}
	stopped := &StoppedHeldError{Holders: r.stoppedHeld}
	for _, d := range r.dev {
		if hasKey(r.stoppedHeld, d.cur.ID) && slices.Contains(d.pendingNow(), "STOP_DEV") {
			stopped.notComplete = append(stopped.notComplete, d.cur.ID)
		}
		if hasKey(r.stoppedHeld, d.cur.ID) && d.rep.Info != nil && d.rep.Info.Flags&ublkctl.FlagUserRecovery != 0 {
			stopped.recovery = append(stopped.recovery, d.cur.ID)
		}
	}
	if err == nil {
		return stopped
	}
	return errors.Join(err, stopped)
}

// discover fills r.dev from sysfs or the configured IDs. A sysfs that
// cannot be read (EMFILE or ENOMEM in the server for a moment) is read
// again every PollInterval until the holder wait's end: a step that gave
// up at once asked the daemon nothing, and it died at SIGKILL with its
// devices live. The step's "discover" entry keeps the first failure.
func (r *run) discover() error {
	s := r.stepStart("discover")
	devs, err := r.findDevices()
	tries := 1
	for ; err != nil; tries++ {
		if tries == 1 {
			s.Err = err.Error()
			r.cfg.logger.WarnContext(r.ctx, "ublk: sysfs could not be read; reading it again", "err", err)
		}
		if !r.sleep(r.holderUntil) {
			return r.stepEnd(s, fmt.Sprintf("sysfs not read in %d tries", tries), err)
		}
		devs, err = r.findDevices()
	}
	r.rep.Devices = make([]DeviceReport, 0, len(devs))
	r.take(r.withDisks(devs))
	r.waiting = true
	result := fmt.Sprintf("%d device(s)", len(devs))
	if tries > 1 {
		result += fmt.Sprintf(", sysfs read on try %d", tries)
	}
	_ = r.stepEnd(s, result, nil)
	return nil
}

// withDisks returns devs less, when the step finds its devices itself
// (no Config.Devices), those with no disk yet, named in the Report's note
// and the log: findNew looks at them again every poll and takes one once
// it has a disk, as it does a device added after the step began. Such a
// device's server may not have opened its /dev/ublkcN yet (ADD_DEV, then
// the open, then START_DEV), so no pass can tell whose it is; taken at
// discovery, it was the daemon's for good, and once another server (a
// new pod's) had started it, the control fallback stopped and deleted it
// under its server. A device with no disk has no block I/O to lose; one
// the daemon serves draining a STOP_DEV of its own is the kill guard's
// (servesMore), which does not kill the daemon while it is not DEAD.
func (r *run) withDisks(devs []Device) []Device {
	if r.cfg.ids != nil {
		return devs
	}
	return slices.DeleteFunc(devs, func(d Device) bool {
		if d.Disk {
			return false
		}
		why := "no disk yet (added and not started, or stopping or stopped): the step's only once it has one and is not another server's"
		r.rep.Note = joinNote(r.rep.Note, d.DiskName()+": "+why)
		r.cfg.logger.InfoContext(r.ctx, "ublk: a device with no disk left out for now", "device", d.DiskName(), "why", why)
		return true
	})
}

// add makes devs the step's, each with its entry in the Report, and
// returns their states.
func (r *run) add(devs ...Device) []*devState {
	for _, d := range devs {
		r.rep.Devices = append(r.rep.Devices, DeviceReport{ID: d.ID, Initial: d, Final: d, InflightBefore: d.Inflight, InflightAfter: d.Inflight})
		r.dev = append(r.dev, &devState{cur: d, inflight: d.Inflight, entry: charEntry(r.sysfs(), d.ID), seen: d.Present(), readAt: time.Now()})
	}
	for i, d := range r.dev { // the append may have moved the reports
		d.rep = &r.rep.Devices[i]
	}
	return r.dev[len(r.dev)-len(devs):]
}

// take makes the step's, of devs (found in sysfs by the step itself, or
// listed by Config.Devices), those that are not another server's: with
// Config.Devices, every one; otherwise devs less those the procfs pass
// tells another's (leaveOthers), and each one it did not tell in time
// marked not known to be the daemon's (devState.untold), said in its
// Report entry and the log. It returns their states.
func (r *run) take(devs []Device) []*devState {
	if r.cfg.ids != nil {
		return r.add(devs...)
	}
	start := time.Now()
	mine, untold := r.leaveOthers(devs)
	added := r.add(mine...)
	for _, d := range added {
		if !slices.Contains(untold, d.cur.ID) {
			continue
		}
		d.untold = fmt.Sprintf("not told from another server's device: the procfs pass ended (%v after it began) before it did; "+
			"the daemon is asked to stop it, the control never stops or deletes it unless a later pass tells it the daemon's", time.Since(start).Round(time.Millisecond))
		d.rep.Steps = append(d.rep.Steps, StepResult{Name: "whose", Start: time.Now(), Result: d.untold})
		r.cfg.logger.WarnContext(r.ctx, "ublk: a device not told from another server's in time", "device", d.cur.DiskName(), "why", d.untold)
	}
	return added
}

// controlled returns, of the step's devices pick picks, those the control
// may stop or delete (the last resort's STOP_DEVs, stopUnderHolders', the
// fallback's), and apart those it may not: the devices not known to be the
// daemon's (devState.untold), the pass that tells another server's having
// ended before it told them. Such a device may be another server's, live
// under its VMs: it is its daemon's to stop, which stops its own alone,
// and the control's only once retell tells it the daemon's. Every user of
// the control picks its devices here, so that none can forget the rule.
func (r *run) controlled(pick func(*devState) bool) (mine, untold []*devState) {
	for _, d := range r.dev {
		switch {
		case !pick(d):
		case d.untold != "":
			untold = append(untold, d)
		default:
			mine = append(mine, d)
		}
	}
	return mine, untold
}

// untrackedDevices reads the ublk devices sysfs shows that the step has
// no device for; the error says what of sysfs was not read.
func (r *run) untrackedDevices() ([]Device, error) {
	ids, err := r.untracked()
	var devs []Device
	for _, id := range ids {
		d, rerr := readDevice(r.sysfs(), id)
		if rerr != nil {
			err = errors.Join(err, rerr)
			continue
		}
		devs = append(devs, d)
	}
	return devs, err
}

// untracked lists the IDs of the ublk devices sysfs shows that the step
// has no device for, or only one it saw go: the kernel gives a freed ID
// to the next ADD_DEV, so a device there now with a gone one's ID is
// another device (see refresh). Left out, one the daemon added again
// after deleting the step's (the lowest free ID: a VM whose start raced
// the drain) was passed over by the look before the kill (servesMore),
// and the daemon was killed serving it live.
func (r *run) untracked() ([]int, error) {
	ids, err := listDevices(r.sysfs())
	return slices.DeleteFunc(ids, func(id int) bool { return r.tracks(id, false) }), err
}

// tracks reports whether the step has a device with ID id that is not
// gone, or, with gone, any device with that ID.
func (r *run) tracks(id int, gone bool) bool {
	return slices.ContainsFunc(r.dev, func(d *devState) bool { return d.cur.ID == id && (gone || !d.gone) })
}

// device returns the step's device with ID id that is not gone, nil when
// it has none: a gone one's ID is the kernel's to give to the next
// ADD_DEV, so what has it now is not that device (see refresh).
func (r *run) device(id int) *devState {
	if i := slices.IndexFunc(r.dev, func(d *devState) bool { return d.cur.ID == id && !d.gone }); i >= 0 {
		return r.dev[i]
	}
	return nil
}

// procfsPass returns the context of a procfs pass that tells whose a
// device is: until end (zero: the step's deadline), or the step's
// deadline if that is first, ownersWait from now without one, each as
// Tighten moves it (stageCtx), and not cancelled with r.ctx, whose end (a
// force) must not leave a device untold. Before, the pass kept the end it
// began with: a deadline moved earlier during a slow pass (a pod deleted
// with a shorter grace) left the step in the pass past it, and the daemon
// was asked to stop after the pod's SIGKILL was due, or never.
func (r *run) procfsPass(end func(*stages) time.Time) (context.Context, context.CancelFunc) {
	limit := time.Now().Add(ownersWait)
	return r.stageCtx(context.WithoutCancel(r.ctx), func(s *stages) time.Time {
		if e := earlier(end(s), s.deadline); !e.IsZero() {
			return e
		}
		return limit
	})
}

// stageEnd returns the end of the stage the run is in (the last
// resort's part, the daemon's own stop's, the control's; the deadline
// from the kill's on), as Tighten moves it, or limit if that is first: a
// pass for a device found once the holder wait is over ends there, and
// the stage's work (the last resort's STOP_DEVs, the fallback, the kill)
// comes in its time. Before, such a pass had ownersWait up to the
// deadline: on a slow procfs it held the wait loop past the fallback's
// point, and a hung daemon's device was left live (row 1195).
//
// The run stays in the control's stage past the kill point when no kill
// came (a device live on a vulnerable kernel): it is in the kill's part
// then, which has no work to keep time for. Ended at the kill point, a
// pass there ended before it began, and a device the daemon added then
// was never told its own: the control never sent it STOP_DEV (row 1260).
// It runs on the run's goroutine, the one writer of r.stage, so it reads
// r.stage without mu (see run).
func (r *run) stageEnd(limit time.Time) func(*stages) time.Time {
	var end func(*stages) time.Time
	switch {
	case r.stage == inLastResort:
		end = lastResortEnd
	case r.stage == inStop:
		end = fallbackEnd
	case r.stage == inControl && time.Now().Before(r.killAt):
		end = killEnd
	default:
		return endAt(limit)
	}
	return func(s *stages) time.Time { return earlier(end(s), limit) }
}

// earlier returns the earlier of a and b, a zero time being no end.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// endAt is a stage's end that Tighten does not move (procfsPass, which
// ends at the deadline all the same when that comes first).
func endAt(at time.Time) func(*stages) time.Time { return func(*stages) time.Time { return at } }

// findNew makes the step's, when it finds its devices itself (no
// Config.Devices), every device sysfs shows now that it had no device
// for: one the daemon added after the step began (a VM whose start raced
// the drain) is the daemon's as much as those found first, and left out
// it was neither waited for nor stopped, and the daemon was killed with
// it live once the others were stopped. Another server's is left alone
// as at discovery (leaveOthers), looked at once per char device entry.
// An ID the step has a device for is not looked at again: once that
// device went, the ID's next device is another's (see refresh). A device
// with no disk yet is looked at again every poll, and taken only once it
// has one: its server adds it (ADD_DEV), then opens its /dev/ublkcN, and
// only then starts it, so one found between the first two has its char
// device open in no process, and the pass cannot tell whose it is; taken
// then, it was the daemon's for good, and once another server (a new
// pod's) had started it, the control fallback stopped and deleted it
// under its server. A device with no disk has no block I/O: left out
// until it has one, it costs the daemon's kill nothing (servesMore asks
// the driver about a disk-less one it serves).
func (r *run) findNew() {
	if r.cfg.ids != nil || !r.waiting {
		return
	}
	ids, err := r.untracked()
	if err != nil {
		return // not listed this time: the next poll lists it again
	}
	var fresh []Device
	for _, id := range ids {
		if r.tracks(id, true) {
			continue // the ID of a device of the step's that went: another's now, as refresh has it
		}
		if e, ok := r.others[id]; ok && e != 0 && e == charEntry(r.sysfs(), id) {
			continue
		}
		if d, err := readDevice(r.sysfs(), id); err == nil && d.Disk {
			fresh = append(fresh, d)
		}
	}
	if len(fresh) == 0 {
		return
	}
	added := r.take(fresh)
	now := time.Now()
	for _, d := range added {
		d.rep.Steps = append(d.rep.Steps, StepResult{Name: "in sysfs", Start: r.start, Duration: now.Sub(r.start),
			Result: "found after the step began, " + d.cur.State() + ": the daemon's, as those found first"})
		r.cfg.logger.WarnContext(r.ctx, "ublk: a device added after the step began", "device", d.cur.DiskName(), "state", d.cur.State())
	}
}

// findDevices reads the step's devices from sysfs: the configured IDs, or
// every ublk device, another server's too (take leaves those out).
func (r *run) findDevices() ([]Device, error) {
	if r.cfg.ids == nil {
		return scanDevices(r.sysfs())
	}
	var devs []Device
	for _, id := range r.cfg.ids {
		d, err := readDevice(r.sysfs(), id)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// ownersWait bounds the procfs pass that tells another server's devices
// from the daemon's (othersDevices) where the step has no later end to
// give it: no deadline, or a look past the kill floor, whose stages need
// the wait loop. Tens of milliseconds on an idle node, 1.0-1.47 s at load
// 18-21 in a QEMU guest.
const ownersWait = time.Second

// leaveOthers takes out of devs, every ublk device sysfs shows, those
// another server serves (othersDevices), and notes each in the Report and
// the log: the step neither waits for them nor stops them. Its procfs
// pass has the time the holder wait has, to the holder scans' end
// (killFloor) while that is ahead, once it passed the rest of the stage
// the step is in, ownersWait at most (findNew: the later stages need the
// wait loop; stageEnd), ownersWait without a deadline, and never past the
// deadline: a device found once the floor passed is still told
// from another server's, which the fallback would otherwise stop and
// delete once the daemon exited. Before, the pass had 1 s wherever the
// floor was later, and on a loaded node it was cut short with another
// server's live device taken for the daemon's. It returns the rest, and
// the IDs of those it did not tell in time (take marks them).
func (r *run) leaveOthers(devs []Device) (mine []Device, untold []int) {
	now := time.Now()
	end := r.stageEnd(now.Add(ownersWait))
	if f := r.killFloor(); !f.IsZero() && now.Before(f) {
		end = holderEnd // as Tighten moves it
	}
	ctx, cancel := r.procfsPass(end)
	defer cancel()
	others, untold := othersDevices(ctx, r.cfg.sysRoot, r.cfg.procRoot, devs, daemonPID(r.cfg.daemon), r.cfg.beforeProcess, r.cfg.beforeCharRead)
	return slices.DeleteFunc(devs, func(d Device) bool {
		why, ok := others[d.ID]
		if ok {
			r.leaveAlone(d, why)
		}
		return ok
	}), untold
}

// leaveAlone records that d is another server's (why), left alone: the
// Report's note and the log say so, and r.others keeps its char entry.
func (r *run) leaveAlone(d Device, why string) {
	if r.others == nil {
		r.others = map[int]uint64{}
	}
	r.others[d.ID] = charEntry(r.sysfs(), d.ID)
	r.rep.Note = joinNote(r.rep.Note, d.DiskName()+": "+why)
	r.cfg.logger.InfoContext(r.ctx, "ublk: another server's device left alone", "device", d.DiskName(), "why", why)
}

// sysfs is the sysfs tree the step reads its devices from.
func (r *run) sysfs() sysfs { return sysfs{root: r.cfg.sysRoot, before: r.cfg.beforeSysfs} }

// refresh re-reads every device and records disappearances, and the
// appearance of a listed device not in sysfs before; it makes the step's
// a device added since the step began (findNew).
func (r *run) refresh() {
	r.findNew()
	now := time.Now()
	since := r.requestedAt
	if since.IsZero() {
		since = r.start
	}
	for _, d := range r.dev {
		if d.gone {
			continue
		}
		next, e, err := pollDevice(r.sysfs(), d.cur.ID)
		if err != nil {
			d.readErr = err // keep the last state; a transient read error is not a change
			continue
		}
		d.readAt, d.readErr = now, nil
		if next.Char && d.entry != 0 && e != 0 && e != d.entry {
			// Another device has its ID: this one was deleted and the
			// kernel gave the ID to the next ADD_DEV (another server's,
			// a new pod's). Taken for this one, it was waited for, and
			// the control fallback stopped and deleted it.
			next = Device{ID: d.cur.ID}
		}
		by := "by the daemon"
		switch {
		case d.stopped:
			by = "after STOP_DEV"
		case slices.Contains(d.pending, "STOP_DEV"):
			by = "after STOP_DEV (sent, not seen complete)" // its start removes the disk
		case d.deleted:
			by = "by the control's DEL_DEV" // which stops a live device too
		}
		charBy := by // DEL_DEV removes the char device, whatever stopped the disk
		switch {
		case d.deleted:
			charBy = "by the control's DEL_DEV"
		case slices.Contains(d.pending, "DEL_DEV"):
			// Sent once the daemon is gone, and run on by the driver:
			// before, "by the daemon", dead by then.
			charBy = "by the control's DEL_DEV (sent, not seen complete)"
		}
		if !d.seen && next.Present() {
			d.seen = true
			d.entry = e
			d.rep.Steps = append(d.rep.Steps, StepResult{Name: "in sysfs", Start: r.start, Duration: now.Sub(r.start),
				Result: "not in sysfs when the step began; seen " + next.State() + " now"})
			r.cfg.logger.InfoContext(r.ctx, "ublk: a listed device is in sysfs now", "device", next.DiskName(), "state", next.State())
		}
		if d.cur.Disk && !next.Disk {
			d.rep.Steps = append(d.rep.Steps, StepResult{Name: "disk removed", Start: since, Duration: now.Sub(since), Result: by})
		}
		if d.cur.Char && !next.Char {
			d.rep.Steps = append(d.rep.Steps, StepResult{Name: "char removed", Start: since, Duration: now.Sub(since), Result: charBy})
		}
		if next.Disk {
			d.inflight = next.Inflight
		}
		d.cur = next
		if !d.gone && d.seen && !next.Present() {
			r.cfg.logger.InfoContext(r.ctx, "ublk: a device is gone from sysfs", "device", d.cur.ID, "by", charBy)
		}
		d.gone = d.seen && !next.Present()
	}
}

// waitHolders waits until no disk is held open, at most until
// holderUntil. It returns the holders left, nil when there are none. A
// possible holder (a process part of whose holds the scan could not read:
// its mappings, a ring's registered files) is one: every scan reads it
// again, and it stops counting only once a scan knows it holds nothing.
// When the wait begins it logs whom it waits for: it can last until the
// last-resort point, and the holders step's line comes only at its end.
func (r *run) waitHolders() map[int][]Holder {
	s := r.stepStart("holders")
	for waiting := false; ; {
		held, scanErr := r.scanHolders(holderEnd)
		r.noteHolders(held)
		if len(held) == 0 {
			_ = r.stepEnd(s, "no holders", scanErr)
			return nil
		}
		if !waiting && (r.holderUntil.IsZero() || time.Now().Before(r.holderUntil)) {
			waiting = true
			until := "no deadline"
			if !r.holderUntil.IsZero() {
				until = r.holderUntil.Format(time.RFC3339Nano)
			}
			r.cfg.logger.InfoContext(r.ctx, "ublk: waiting for the devices' holders to close", "holders", fmt.Sprint(held), "until", until)
		}
		more := r.sleep(r.holderUntil)
		r.refresh()
		if more {
			continue
		}
		if held = r.onDisks(held); held == nil { // sysfs read again: a disk held may have gone during the last scan
			_ = r.stepEnd(s, "no holders: the disks held went during the last scan", scanErr)
			return nil
		}
		_ = r.stepEnd(s, "", errors.Join(fmt.Errorf("still held open: %v", held), scanErr))
		return held
	}
}

// setAsidePossible takes the possible holders out of held once the holder
// wait is over (and the last resort, when it ran, has killed the doomed
// ones): it returns the holders left, nil when none is. A possible holder
// is not known to hold anything, and sparing its disk has a known cost:
// the daemon is not asked to stop, so it dies with the disk live at the
// pod's SIGKILL, the host-crash path on a vulnerable kernel. Stopping the
// disk costs only the process's I/O to it, if it held it after all; a
// process outside the server's cgroup rarely does (the disks are the
// sandboxes'), and one the kernel never lists (a mapping behind a hung NFS
// or FUSE file, a ring whose fd it closed after registering it) would
// otherwise spare every disk of every drain on its node. The step goes on,
// and the "possible holders" step of the Report names each and what of it
// is not known.
func (r *run) setAsidePossible(held map[int][]Holder) map[int][]Holder {
	var aside []string
	held = dropHolders(held, func(h Holder) bool {
		if h.Kind != blockdev.Possible {
			return false
		}
		if s := h.String(); !slices.Contains(aside, s) {
			aside = append(aside, s)
		}
		return true
	})
	if len(aside) > 0 {
		slices.Sort(aside)
		s := r.stepStart("possible holders")
		err := fmt.Errorf("not known to hold a disk at the end of the holder wait, so not waited for any longer: %s", strings.Join(aside, "; "))
		r.cfg.logger.WarnContext(r.ctx, "ublk: processes that may hold the devices set aside (the kernel did not show what they hold): they keep none from stopping", "possible", strings.Join(aside, "; "))
		_ = r.stepEnd(s, fmt.Sprintf("%d process(es) set aside", len(aside)), err)
	}
	return held
}

// onDisks takes out of held the devices with no disk in sysfs now (as the
// last refresh read it): gone, or stopped, they have none to hold. A scan
// cut short keeps what the last scan that read a process found it hold
// (notRead), and a scan runs for seconds on a loaded node: a device went
// meanwhile (its VM ended, and the daemon deleted it) kept the holds of a
// process the scans did not reach again. Before, those holds kept the
// holder wait going to its end, and then the daemon from being asked to
// stop (a HeldError naming the gone device), its other devices left live
// for the pod's SIGKILL. It returns nil when no device is left.
func (r *run) onDisks(held map[int][]Holder) map[int][]Holder {
	for id := range held {
		if d := r.device(id); d == nil || !d.cur.Disk {
			delete(held, id)
		}
	}
	if len(held) == 0 {
		return nil
	}
	return held
}

// dropHolders deletes from held the holders drop says, and the devices
// left with none; nil when no device is left, so that a caller can tell
// "no device still held" by a nil map.
func dropHolders(held map[int][]Holder, drop func(Holder) bool) map[int][]Holder {
	for id, hs := range held {
		if hs = slices.DeleteFunc(hs, drop); len(hs) == 0 {
			delete(held, id)
		} else {
			held[id] = hs
		}
	}
	if len(held) == 0 {
		return nil
	}
	return held
}

// noteHolders adds holders not seen before to the device reports.
func (r *run) noteHolders(held map[int][]Holder) {
	for _, d := range r.dev {
		for _, h := range held[d.cur.ID] {
			if !slices.Contains(d.rep.Holders, h) {
				d.rep.Holders = append(d.rep.Holders, h)
			}
		}
	}
}

// killFloor is where the holder wait's scans stop reading procfs:
// halfway through the last resort's part of the reserve (zero without a
// deadline: never). The scan running at the last-resort point may finish
// what it can in the first half; the second is the last resort's, for the
// kill of a doomed holder, its exit, the last resort's own scan and its
// STOP_DEVs. A scan that took the whole window left the kill no time to
// see its holder exit, and the daemon was not asked to stop under it.
func (s *stages) killFloor() time.Time {
	if s.lastResort.Deadline.IsZero() {
		return time.Time{}
	}
	return s.holderUntil.Add(s.lastResort.Deadline.Sub(s.holderUntil) / 2)
}

// scanHolders finds the holders of every disk (and its partitions) in one
// pass over procfs and sysfs (stacked and loop devices), by device ID,
// reading procfs until the end of a stage at most (end; zero: no end, and
// earlier when Tighten moves it), never past the end of the last resort's
// part of the reserve; what it did not read by then is not known (see
// notRead). Its error says what the scan could not read; the holders are
// what it found.
func (r *run) scanHolders(end func(*stages) time.Time) (map[int][]Holder, error) {
	held := map[int][]Holder{}
	owner := map[blockdev.DevNum]int{}
	r.devNums = owner
	var devs []blockdev.DevNum
	named := map[string]blockdev.DevNum{} // by kernel name, for sysfs's fs/
	unnumbered := map[int]error{}         // disks whose number sysfs did not give
	partsUnread := map[int]error{}        // disks a partition's number of which sysfs did not give
	stackUnread := map[int]error{}        // disks whose stacked devices sysfs did not all list
	for _, d := range r.dev {
		if !d.cur.Disk {
			continue
		}
		// The partitions read are scanned, the stacked devices listed are
		// holders; what was not read is not known.
		parts, perr := blockdev.Partitions(r.cfg.sysRoot, d.cur.DiskName())
		hs, serr := blockdev.StackHolders(r.cfg.sysRoot, d.cur.DiskName(), parts)
		if len(hs) > 0 {
			held[d.cur.ID] = holders(hs)
		}
		if perr != nil || serr != nil {
			if there, xerr := exists(filepath.Join(r.cfg.sysRoot, blockDir, d.cur.DiskName())); there || xerr != nil {
				if perr != nil {
					partsUnread[d.cur.ID] = perr
				}
				if serr != nil {
					stackUnread[d.cur.ID] = serr
				}
			}
		}
		n, err := blockdev.ParseDevNum(d.cur.Dev)
		if err != nil { // the last refresh could not read it: once more
			n, err = blockdev.ReadDevNum(r.cfg.sysRoot, d.cur.DiskName())
		}
		if err == nil {
			owner[n] = d.cur.ID
			devs = append(devs, n)
			named[d.cur.DiskName()] = n
		} else if there, serr := exists(filepath.Join(r.cfg.sysRoot, blockDir, d.cur.DiskName())); there || serr != nil {
			unnumbered[d.cur.ID] = err
		}
		for _, p := range parts {
			owner[p.Dev] = d.cur.ID
			devs = append(devs, p.Dev)
			named[p.Name] = p.Dev
		}
	}
	if len(devs) == 0 {
		r.numberNotRead(held, unnumbered, partsUnread, stackUnread)
		r.lastHeld = held
		return held, nil
	}
	// The scan stops where the daemon's own stop needs its part of the
	// reserve: a scan of a loaded node's procfs takes seconds, and one run
	// to its end asked the daemon to stop too late, or never, leaving it to
	// die at SIGKILL with its devices live. Not at ctx's end before that
	// (a drain's force): a scan cut short finds fewer holders than there
	// are, and what it did not read is not known (notRead), never "no
	// holder".
	sctx, cancel := r.stageCtx(context.WithoutCancel(r.ctx), end)
	defer cancel()
	// A loop device backed by a disk holds it in the kernel, with no
	// process: sysfs, like the stacked devices. So does a file system on
	// it that no mountinfo read shows (unmounted lazily, in a namespace
	// not read); a mounted one is named by its mounts. So does a file
	// system's journal on it, the file system on another device: procfs
	// shows it, and no mount of the disk ever does. Read before procfs,
	// by the stage's clock: after a scan cut at the stage's end they ran
	// past it, tens of reads a device (the guest's 8: 187 ms), and took
	// the last resort's part (docs/faults.md row 3601).
	loops, lerr := blockdev.LoopHolders(sctx, r.cfg.sysRoot, devs, r.cfg.beforeSysfs)
	fss, ferr := blockdev.FileSystemHolders(sctx, r.cfg.sysRoot, named, r.cfg.beforeSysfs)
	journals, jerr := blockdev.JournalHolders(sctx, r.cfg.procRoot, named, r.cfg.beforeSysfs)
	found, err := blockdev.ScanWithHook(sctx, r.cfg.procRoot, devs, r.cfg.beforeProcess)
	var cut *blockdev.CutError
	if err != nil && !errors.As(err, &cut) {
		r.cfg.logger.WarnContext(r.ctx, "ublk: holders scan could not read procfs; the last scan's holders stand", "err", err)
	}
	for _, dev := range devs {
		id := owner[dev]
		for _, h := range holders(found[dev]) {
			// A possible holder is listed for every number scanned, a
			// disk's partitions included: once per device is enough.
			if h.Kind != blockdev.Possible || !slices.Contains(held[id], h) {
				held[id] = append(held[id], h)
			}
		}
		if hs := loops[dev]; len(hs) > 0 {
			held[id] = append(held[id], holders(hs)...)
		}
		mounted := slices.ContainsFunc(found[dev], func(h blockdev.Holder) bool { return h.Kind == blockdev.Mount })
		if hs := fss[dev]; len(hs) > 0 && !mounted {
			held[id] = append(held[id], holders(hs)...)
		}
		if hs := journals[dev]; len(hs) > 0 {
			held[id] = append(held[id], holders(hs)...)
		}
	}
	r.notReadable(held)
	r.numberNotRead(held, unnumbered, partsUnread, stackUnread)
	r.kindNotRead(held, owner, blockdev.Loop, "loop devices not all read", lerr)
	r.kindNotRead(held, owner, blockdev.FileSystem, "file systems not all looked for", errors.Join(ferr, jerr))
	switch {
	case cut != nil:
		r.notRead(held, cut)
	case err != nil: // procfs not listed: no process read
		r.notScanned(held, err)
	}
	held = r.onDisks(held) // what was kept of a device gone before the scan
	r.lastHeld = held
	return held, err
}

// notReadable adds to held, for each process the scan read but whose fds
// or maps it could not (a possible holder, blockdev.NotRead: EACCES,
// EMFILE), whose rings' registered files it could not list (a busy ring),
// or whose mount namespace's mountinfo it could not read through any of
// its processes, the holds through them that the last scan found of that
// process (its PID, and its start time when both scans read it): a
// VMM found holding a disk is not forgotten because its fds could not be
// read once. Before, the scan said nothing of such a process, and the
// daemon was asked to stop under the VMM the scan before had found.
func (r *run) notReadable(held map[int][]Holder) {
	for id, hs := range held {
		for _, p := range hs {
			u := blockdev.NotRead(blockdev.Holder(p))
			if u == (blockdev.Unread{}) {
				continue
			}
			for _, h := range r.lastHeld[id] {
				kept := sameProcess(h, p) && u.Hides(h.Kind)
				if kept && !slices.Contains(held[id], h) {
					held[id] = append(held[id], h)
				}
			}
		}
	}
}

// numberNotRead adds to held what the scan does not know of each disk
// still in sysfs, and a possible holder with no PID saying why: the holds
// the last scan found through what was not read stand. A disk whose
// device number was not read (unnumbered: /sys/block/ublkbN/dev
// unreadable, EMFILE or ENOMEM in the server), or one of whose
// partitions' (partsUnread: blockdev.Partitions), was not scanned: no
// process, mount or loop device could be matched to that number, so every
// hold of the disk the last scan found stands (a partition's stacked
// devices too: one not listed is not read by name either). A disk whose
// holders/ directories were not all listed (stackUnread:
// blockdev.StackHolders) keeps the stacked devices the last scan found;
// its numbers were scanned, so its other holds are as the scan found
// them. Taken for one nothing holds, such a disk had the daemon asked to
// stop under a VMM, a mount or a device-mapper device an earlier scan had
// found.
func (r *run) numberNotRead(held map[int][]Holder, unnumbered, partsUnread, stackUnread map[int]error) {
	keep := func(id int, kept func(Holder) bool) {
		for _, h := range r.lastHeld[id] {
			if kept(h) && !(h.Kind == blockdev.Possible && h.PID == 0) && !slices.Contains(held[id], h) { // a possible with no PID: said again below
				held[id] = append(held[id], h)
			}
		}
	}
	for id, err := range unnumbered {
		keep(id, func(h Holder) bool { return h.Kind != blockdev.Stacked }) // sysfs, by name: read again
		held[id] = append(held[id], Holder{Kind: blockdev.Possible, Detail: fmt.Sprintf("ublkb%d's device number not read (%v): "+
			"what holds the disk is not known; the last scan's holders stand", id, err)})
	}
	for id, err := range partsUnread {
		keep(id, func(Holder) bool { return true })
		held[id] = append(held[id], Holder{Kind: blockdev.Possible, Detail: fmt.Sprintf("ublkb%d's partitions not all read (%v): "+
			"what holds them is not known; the last scan's holders stand", id, err)})
	}
	for id, err := range stackUnread {
		keep(id, func(h Holder) bool { return h.Kind == blockdev.Stacked })
		held[id] = append(held[id], Holder{Kind: blockdev.Possible, Detail: fmt.Sprintf("ublkb%d's stacked devices not all listed (%v): "+
			"the devices the last scan found stacked stand", id, err)})
	}
}

// kindNotRead adds to held, when a read of sysfs for the holds of kind
// failed (err: blockdev.LoopHolders, blockdev.FileSystemHolders), for
// every disk scanned (a number in owner), the holds of that kind the last
// scan found, and a possible holder saying what was not read (what) and
// why. Such a read found none where it failed: taken for none, it had the
// daemon asked to stop under a loop device or a file system an earlier
// scan had found, failing its I/O.
func (r *run) kindNotRead(held map[int][]Holder, owner map[blockdev.DevNum]int, kind, what string, err error) {
	if err == nil {
		return
	}
	p := Holder{Kind: blockdev.Possible, Detail: fmt.Sprintf("%s (%v): what holds the disks through them is not known; "+
		"the last scan's stand", what, err)}
	for _, id := range owner {
		for _, h := range r.lastHeld[id] {
			if h.Kind == kind && !slices.Contains(held[id], h) {
				held[id] = append(held[id], h)
			}
		}
		if !slices.Contains(held[id], p) {
			held[id] = append(held[id], p)
		}
	}
}

// notScanned adds to held what a scan that could not list procfs at all
// (err) does not know: every hold the last scan found there (a process's,
// a mount, swap) stands, and the processes are a possible holder of every
// disk, with no PID, as those of a scan cut short are (see notRead). A
// failed scan found no holder because it read none: taken for one that
// read them all, it had the daemon asked to stop under a VMM an earlier
// scan had found holding its disk.
func (r *run) notScanned(held map[int][]Holder, err error) {
	for id, hs := range r.lastHeld {
		for _, h := range hs {
			switch {
			case h.Kind == blockdev.Stacked || h.Kind == blockdev.Loop || h.Kind == blockdev.FileSystem: // sysfs: read again
			case h.Kind == blockdev.Possible && h.PID == 0: // that scan's processes not read: said again below
			case !slices.Contains(held[id], h):
				held[id] = append(held[id], h)
			}
		}
	}
	p := Holder{Kind: blockdev.Possible, Detail: fmt.Sprintf("procfs not read (%v): what the processes hold is not known; "+
		"the last scan's holders stand", err)}
	for _, d := range r.dev {
		if d.cur.Disk && !slices.Contains(held[d.cur.ID], p) {
			held[d.cur.ID] = append(held[d.cur.ID], p)
		}
	}
}

// sameProcess reports whether holders a and b are of one process: the
// same PID, and the same start time when both scans read it (a process
// that got the PID once the other was reaped started later).
func sameProcess(a, b Holder) bool {
	return a.PID == b.PID && (a.StartTime == 0 || b.StartTime == 0 || a.StartTime == b.StartTime)
}

// notRead adds to held what a scan cut short did not read: for each
// process it did not reach, what the last scan that read it found (a VMM
// found holding a disk is not forgotten because a later scan ran out of
// time before it), and for the rest a possible holder of every disk, with
// no PID: what those processes hold is not known. Like any possible
// holder, it is waited for until the holder wait ends, then set aside:
// the daemon is asked to stop in time, which sparing the disks would not
// do.
func (r *run) notRead(held map[int][]Holder, cut *blockdev.CutError) {
	unread := make(map[int]bool, len(cut.Unread))
	for _, pid := range cut.Unread {
		unread[pid] = true
	}
	for id, hs := range r.lastHeld {
		for _, h := range hs {
			if h.PID > 0 && unread[h.PID] && !slices.Contains(held[id], h) {
				held[id] = append(held[id], h)
			}
		}
	}
	p := Holder{Kind: blockdev.Possible, Detail: fmt.Sprintf("%d of %d processes not read: the holders scan stops in time "+
		"for the last resort's kill and the daemon's stop, and procfs took longer to read than the time left; "+
		"what they hold is not known", len(cut.Unread), cut.Total)}
	for _, d := range r.dev {
		if d.cur.Disk {
			held[d.cur.ID] = append(held[d.cur.ID], p)
		}
	}
}

// requestStop starts watching the daemon's exit and asks it to stop.
func (r *run) requestStop() {
	d := r.cfg.daemon
	if d == nil {
		return
	}
	r.exited, r.waiterDone = make(chan struct{}), make(chan struct{})
	wctx, cancel := context.WithCancel(r.ctx)
	r.stopWaiter = cancel
	go func() {
		defer close(r.waiterDone)
		switch err := d.Wait(wctx); {
		case err == nil:
			close(r.exited)
		case wctx.Err() == nil:
			// Its exit cannot be seen now: the step waits on blind (a
			// daemon with a live device is not killed for that), and
			// says so.
			r.waitErr = err
			r.cfg.logger.WarnContext(r.ctx, "ublk: the daemon's exit could not be watched", "err", err)
		}
	}()
	s := r.stepStart("request stop")
	rctx, rcancel := context.WithTimeout(r.ctx, r.cfg.requestTimeout)
	rctx, cancelAt := r.stageCtx(rctx, fallbackEnd)
	if r.cfg.beforeRequest != nil {
		// Outside any lock of r's: it may Tighten this Teardown, the
		// request then made in the new layout (internal/ublkstep).
		r.cfg.beforeRequest()
	}
	if r.daemonKnownGone() {
		// It stopped on its own (its server told it, as AgentENV's does)
		// after discovery: a request reaches nothing, and its error
		// ("connection refused") would read as the step's failure. The
		// devices it stopped say "by the daemon".
		cancelAt()
		rcancel()
		r.requestedAt = time.Now()
		_ = r.stepEnd(s, "not sent: the daemon had exited before the step asked (it stopped what it served itself)", nil)
		return
	}
	err := d.RequestStop(rctx)
	cancelAt()
	rcancel()
	r.adopt() // a deadline moved during the request: ErrUnconfirmed is read against the new layout
	r.requestedAt = time.Now()
	r.rep.Daemon.Requested = err == nil
	result := "delivered"
	switch {
	case errors.Is(err, ErrUnconfirmed) && !r.fallbackAt.IsZero():
		// Sent, unread: a daemon already stopping reads no request. Waited
		// for as one asked; the planned fallback covers a hung one.
		r.rep.Daemon.Requested, r.rep.Daemon.Unconfirmed = true, true
		r.unconfirmed = err
		result = "sent, not answered (a daemon already stopping reads no request): taken as delivered"
		r.cfg.logger.InfoContext(r.ctx, "ublk: the daemon did not answer the stop request; waiting for it as for one asked", "err", err)
		err = nil
	case err != nil:
		r.rep.Daemon.RequestError = err.Error()
		r.causes = append(r.causes, err)
		result = ""
	}
	_ = r.stepEnd(s, result, err)
}

func (r *run) daemonExited() bool {
	if r.exited == nil {
		return false
	}
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// waitLoop waits for the devices to go and the daemon to exit, running
// the control fallback and the kill when their time comes.
func (r *run) waitLoop() {
	s := r.stepStart("wait")
	defer func() { _ = r.stepEnd(s, r.summary(), nil) }()
	for {
		exited := r.daemonExited() // before refresh: a daemon deletes its devices before it exits
		r.refresh()
		r.stopSeen()
		live, present := r.count()
		now := time.Now()
		switch {
		case present == 0 && (r.cfg.daemon == nil || exited):
			return
		case exited && present > 0:
			r.fallback("the daemon exited and left devices")
			r.refresh()
			return
		case r.rep.Daemon.RequestError != "" && r.fallbackDue():
			r.fallback("the stop request failed")
			continue
		case !r.fallbackAt.IsZero() && !now.Before(r.fallbackAt) && r.fallbackDue():
			r.fallback("devices still live near the deadline")
			continue
		}
		r.maybeKill(live, exited, now)
		if !r.sleep(time.Time{}) {
			return
		}
	}
}

// stopSeen asks the driver (GET_DEV_INFO), once per poll, about each
// device whose STOP_DEV was sent and not seen complete in its window
// (pending), or whose STOP_DEV, not the step's, drained when found
// (draining), and whose disk is gone: the driver runs the command on, and
// the device is DEAD once it completed, its I/O in flight answered, so
// killing the daemon is safe. Seen complete only by the command's own
// answer, it was counted live to the step's end: the daemon was left
// running and the device undeleted, and Stop returned an UnsafeError
// naming a device that was safe.
func (r *run) stopSeen() {
	if r.ctl == nil {
		return
	}
	for _, d := range r.dev {
		if !slices.Contains(d.pending, "STOP_DEV") && !d.draining || !d.live() || d.cur.Disk {
			continue
		}
		info, err := r.pollInfo(d.cur.ID)
		if err != nil || info.State != ublkctl.StateDead {
			continue // still pending, as it was
		}
		d.dead = true
		sent := "sent and not seen complete in its window"
		if !slices.Contains(d.pending, "STOP_DEV") {
			sent = "not the step's, its disk gone when the step found it"
		}
		d.rep.Steps = append(d.rep.Steps, StepResult{Name: "STOP_DEV complete", Start: time.Now(),
			Result: sent + "; GET_DEV_INFO says dead now: the kernel completed it"})
		r.cfg.logger.InfoContext(r.ctx, "ublk: a STOP_DEV not seen complete in its window has completed", "device", d.cur.DiskName())
	}
}

// fallbackDue reports whether a device is live that no control fallback
// with the daemon running has looked at: the fallback's reasons (the
// request failed, the deadline is near) hold for a device found live
// after it ran as for those it stopped. Run once for the step, it left
// such a device live, the daemon not killed on a vulnerable kernel, for
// the pod's SIGKILL to kill it with.
func (r *run) fallbackDue() bool {
	return slices.ContainsFunc(r.dev, func(d *devState) bool { return d.live() && !d.fellBack })
}

func (r *run) count() (live, present int) {
	for _, d := range r.dev {
		if d.live() {
			live++
		}
		if d.cur.Present() {
			present++
		}
	}
	return live, present
}

// maybeKill applies the kernel rule. While a device may be live (see
// devState.live) the daemon is killed only on a kernel where that is safe,
// at the kill's part of the reserve. Once none is, killing is safe
// everywhere, and the daemon gets ExitWait to exit by itself first.
func (r *run) maybeKill(live int, exited bool, now time.Time) {
	if r.cfg.daemon == nil || exited || r.killed {
		return
	}
	atKill := !r.killAt.IsZero() && !now.Before(r.killAt)
	if live > 0 {
		r.exitWaitFrom = time.Time{}
		if r.t.class.MayKillWithLiveDevices() && atKill {
			r.kill("deadline near; kernel " + string(r.t.class) + ", devices still live")
		}
		return
	}
	if r.exitWaitFrom.IsZero() {
		r.exitWaitFrom = now
	}
	var why string
	switch {
	case !now.Before(r.exitWaitFrom.Add(r.cfg.exitWait)):
		why = "no live device left and the daemon did not exit within ExitWait"
	case atKill:
		why = "deadline near; no live device left"
	default:
		return
	}
	if !r.t.class.MayKillWithLiveDevices() {
		more, looked := r.servesMore()
		if more {
			return // live now: the next look counts them
		}
		// The look took time (the daemon's fds, a procfs pass to tell
		// whose a disk is): a device the daemon added or started since
		// this poll's read (a listed one seen late, a VM whose start raced
		// the drain) is counted only by a read after it. Before, the kill
		// followed at once, and the daemon was SIGKILLed with it live.
		r.refresh()
		if live, _ := r.count(); live > 0 {
			r.exitWaitFrom = time.Time{}
			return // the next poll decides
		}
		if r.diskSince(looked) {
			return // the next poll's look tells whose it is
		}
		// The daemon may have exited during the look: killed then, the
		// Report and the log said the step killed a daemon that had
		// exited by itself (a Process's Kill answers an exited one with
		// no error). The next poll sees the exit.
		if r.daemonExited() {
			return
		}
	}
	r.kill(why)
}

// servesMore makes the step's, right before the daemon is killed with no
// device of the step live, every disk in sysfs that the daemon still
// serves (it has the disk's /dev/ublkcN open, which the driver lets only
// a device's server open) and the step had no device for: one left out
// by Config.Devices, or taken for another server's. It reports whether
// there was one: the daemon is then not killed, on a kernel where killing
// it with a live disk may crash the host. Before, the step looked at its
// own devices alone, and killed the daemon with such a disk live. With
// the daemon's PID it reads that process's fds alone. It also returns
// the disks its sysfs read saw (diskEntries), for diskSince.
//
// When sysfs cannot be listed or a device in it read, or the daemon's fds
// (EMFILE or ENOMEM in the server for a moment; EACCES; procfs not showing
// a daemon that has not exited), the step cannot tell, and servesMore
// reports true too (see cannotTell): the daemon is not killed on a guess. Killing
// it is no safer than the pod's SIGKILL, which ends it at the deadline
// anyway, and a daemon that serves a live disk may still stop it in the
// time left; the next poll looks again.
//
// Without the daemon's PID (DaemonFuncs with no PidFunc) there are no fds
// to read: a live disk the step does not have may be the daemon's unless
// it is another server's (its /dev/ublkcN open outside the cgroup above
// the server's, as at discovery: othersDevices), and while one is, the
// step cannot tell either. Before, the look was skipped for such a daemon,
// and it was killed serving a live disk the step had no device for.
func (r *run) servesMore() (more bool, looked map[int]uint64) {
	pid := daemonPID(r.cfg.daemon)
	disks, err := r.untrackedDevices()
	looked = diskEntries(r.sysfs(), disks)
	disks = slices.DeleteFunc(disks, func(d Device) bool {
		// Without the PID, one discovery told was another server's is not
		// looked at again; with it, the daemon's fds are read for every one.
		e, ok := r.others[d.ID]
		return !d.Disk && (!d.Char || r.driverDead(d.ID)) || pid <= 0 && ok && e != 0 && e == charEntry(r.sysfs(), d.ID)
	})
	if err != nil {
		r.cannotTell(err)
		return true, looked
	}
	r.blind = nil
	if len(disks) == 0 {
		return false, looked
	}
	ctx, cancel := r.procfsPass(endAt(time.Now().Add(ownersWait)))
	defer cancel()
	if pid <= 0 {
		return r.mayServe(ctx, disks), looked
	}
	served, err := daemonServes(ctx, r.cfg.sysRoot, r.cfg.procRoot, disks, pid)
	if errors.Is(err, fs.ErrNotExist) && r.daemonGone() {
		return false, looked // exited: it serves none
	}
	if err != nil { // its fds not read, or not shown by a daemon that runs: no more a "serves none" than sysfs not read
		r.cannotTell(err)
		return true, looked
	}
	r.blind = nil
	disks = slices.DeleteFunc(disks, func(d Device) bool { _, ok := served[d.ID]; return !ok })
	if len(disks) == 0 {
		return false, looked
	}
	added := r.add(disks...)
	now := time.Now()
	for _, d := range added {
		d.fellBack = true // left out of the step (Config.Devices, another server's): kept live, the daemon with it
		state := d.cur.State()
		if !d.cur.Disk {
			d.draining = true
			state = "its disk gone from sysfs and the driver not saying DEAD (a STOP_DEV draining its I/O in flight, or not read)"
		}
		d.rep.Steps = append(d.rep.Steps, StepResult{Name: "served by the daemon", Start: now,
			Result: "/dev/" + d.cur.CharName() + " " + served[d.cur.ID] + " the daemon, " + state + ", not one of the step's devices: the daemon is not killed while it serves it"})
		r.cfg.logger.WarnContext(r.ctx, "ublk: the daemon still serves a disk the step did not have; not killing it", "device", d.cur.DiskName())
	}
	return true, looked
}

// diskEntries returns, of devs, the IDs of those with a disk, each with
// its char device's sysfs entry (charEntry): what a look at them saw.
func diskEntries(sys sysfs, devs []Device) map[int]uint64 {
	seen := map[int]uint64{}
	for _, d := range devs {
		if d.Disk {
			seen[d.ID] = charEntry(sys, d.ID)
		}
	}
	return seen
}

// diskSince reports whether sysfs shows now a disk the step has no
// device for that the look before the kill did not see (looked, from
// servesMore: an ID not there, or there with another char entry, or
// there with no disk yet), or cannot be listed: with Config.Devices
// (findNew takes none) a device the daemon added or started during the
// look is not the step's, and only a look at it tells whether the daemon
// serves it. Before, the read after the look (row 1414) read the step's
// devices alone, and the daemon was SIGKILLed with such a disk live.
func (r *run) diskSince(looked map[int]uint64) bool {
	disks, err := r.untrackedDevices()
	if err != nil {
		return true // servesMore says why at the next poll, as it cannot tell
	}
	return slices.ContainsFunc(disks, func(d Device) bool {
		e, ok := looked[d.ID]
		return d.Disk && (!ok || e != charEntry(r.sysfs(), d.ID))
	})
}

// driverDead reports whether the driver says device id is DEAD
// (GET_DEV_INFO): stopped, no block I/O in flight. A disk gone from sysfs
// does not say so: the kernel removes it as STOP_DEV begins, before the
// I/O in flight, which only the daemon answers, has drained. Not read (no
// control device, or the command failed): false, the device may be live.
// Before, servesMore passed over every disk-less device as stopped, and
// the daemon was killed while a disk it served beyond the step's drained
// under a STOP_DEV (its own), the host-crash path on a vulnerable kernel.
func (r *run) driverDead(id int) bool {
	if r.cfg.openControl == nil || r.openControl() != nil {
		return false
	}
	info, err := r.pollInfo(id)
	return err == nil && info.State == ublkctl.StateDead
}

// pollInfo asks the driver about device id (GET_DEV_INFO) for a poll's
// time, not less than 100 ms: GET_DEV_INFO answers in microseconds, and
// one abandoned at a tiny PollInterval would never be read.
func (r *run) pollInfo(id int) (ublkctl.DevInfo, error) {
	ctx, cancel := context.WithTimeout(r.ctx, max(r.cfg.poll, 100*time.Millisecond))
	defer cancel()
	return r.ctl.DevInfo(ctx, id)
}

// mayServe is servesMore for a daemon whose PID the step does not know:
// it reports whether a disk of disks (live, not the step's) may be the
// daemon's, not known to be another server's (othersDevices), and if so
// records that the step cannot tell (cannotTell), naming the disks.
func (r *run) mayServe(ctx context.Context, disks []Device) bool {
	others, _ := othersDevices(ctx, r.cfg.sysRoot, r.cfg.procRoot, disks, 0, r.cfg.beforeProcess, r.cfg.beforeCharRead) // one not told may be the daemon's
	var names []string
	for _, d := range disks {
		if _, ok := others[d.ID]; !ok {
			names = append(names, d.DiskName())
		}
	}
	if len(names) == 0 {
		return false
	}
	r.cannotTell(fmt.Errorf("ublk: the daemon's PID is not known (DaemonFuncs with no PidFunc), so its fds cannot be read: "+
		"%s, live and not the step's, not known to be another server's, may be its", strings.Join(names, ", ")))
	return true
}

// daemonGone reports whether the daemon has exited, as its exit watcher
// saw it or one look now (Daemon.Wait with a context already ended): the
// process, not procfs, which may not show a process that runs (mounted
// with hidepid=invisible, or another PID namespace's). Before, a daemon
// whose procfs entry was not there was taken for one that exited, and
// killed with a disk it served live.
func (r *run) daemonGone() bool {
	if r.daemonExited() {
		return true
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.ctx))
	cancel()
	return r.cfg.daemon.Wait(ctx) == nil
}

// cannotTell records that servesMore could not read sysfs or the daemon's
// fds (err), so the
// daemon was not killed: the first time as the Report's "served by the
// daemon" step and a warning; the latest failure stays in r.blind until a
// look reads them again, and one still there at the step's end is in
// Report.Note beside the daemon left running.
func (r *run) cannotTell(err error) {
	if r.blindSince.IsZero() {
		r.blindSince = time.Now()
		s := r.stepStart("served by the daemon")
		_ = r.stepEnd(s, "not known whether the daemon still serves a disk the step does not have (sysfs, or the daemon's fds, not read): "+
			"not killed while the step cannot tell; looked at again every poll", err)
		r.cfg.logger.WarnContext(r.ctx, "ublk: not killing the daemon: whether it still serves another disk cannot be read", "err", err)
	}
	r.blind = err
}

func (r *run) kill(why string) {
	s := r.stepStart("kill daemon")
	r.killed = true
	r.enter(pastKill)
	err := r.cfg.daemon.Kill(r.ctx)
	r.rep.Daemon.Killed = err == nil
	if err != nil {
		r.rep.Daemon.KillError = err.Error()
	}
	r.cfg.logger.WarnContext(r.ctx, "ublk: killing the daemon", "why", why, "err", err)
	_ = r.stepEnd(s, why, err)
}

// sleep waits one poll interval (shorter if until comes first, and
// shorter if the daemon exits or Tighten moves the deadline: the caller's
// next look reads the stages' new ends). It returns false when until has
// passed or ctx is done.
func (r *run) sleep(until time.Time) bool {
	if r.adopt() {
		return true // until may be another now
	}
	d := r.cfg.poll
	if !until.IsZero() {
		left := time.Until(until)
		if left <= 0 {
			return false
		}
		d = min(d, left)
	}
	if r.daemonExited() {
		return true // the caller's next look settles it
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-r.ctx.Done():
		return false
	case <-r.exited: // nil (blocks forever) without a daemon
		return true
	case <-r.moved:
		r.adopt()
		return true
	case <-tm.C:
		return true
	}
}

// fallback stops live devices through the control device, and deletes
// devices the daemon no longer holds. With the daemon running, it looks
// at the devices no fallback has looked at (fallbackDue); once the
// daemon is gone, at every device left. It acts on the devices known to
// be the daemon's first, and only then passes again over those not known
// (retell), acting on the ones that pass tells the daemon's: the pass
// runs until the kill's part (the deadline once the daemon is gone), and
// on a slow procfs, run first, it left no time for the STOP_DEVs of the
// daemon's own devices, left live for the pod's SIGKILL with a hung
// daemon.
func (r *run) fallback(why string) {
	gone := r.cfg.daemon == nil || r.daemonExited()
	devs, untold := r.controlled(func(d *devState) bool { return d.cur.Present() && (gone || !d.fellBack) })
	for _, d := range r.dev {
		// One not known to be the daemon's is looked at all the same, or
		// fallbackDue would call for it again at once, every poll, with
		// no sleep between.
		d.fellBack = d.fellBack || d.cur.Present()
	}
	r.enter(inControl)
	control := r.cfg.openControl != nil
	var s StepResult
	if control {
		s = r.stepStart("control fallback")
		if err := r.openControl(); err != nil {
			_ = r.stepEnd(s, why, err)
			control = false
		}
	}
	if control {
		r.controlDevs(devs, gone)
	}
	if gone {
		r.retell(nil)
	} else {
		r.retell(killEnd)
	}
	if control {
		r.controlDevs(slices.DeleteFunc(untold, func(d *devState) bool { return d.untold != "" }), gone) // those retell told the daemon's
		_ = r.stepEnd(s, why, nil)
	}
}

// controlDevs is the control fallback's work on devs (see fallback):
// GET_DEV_INFO, STOP_DEV while a device is live, and DEL_DEV once the
// daemon is gone, except for a device kept for its next server.
func (r *run) controlDevs(devs []*devState, gone bool) {
	for _, d := range devs {
		until := killEnd // keep the time to kill once every device is stopped
		if gone {
			until = nil // no kill to keep time for
		}
		start := time.Now()
		var info ublkctl.DevInfo
		infoErr := r.within(until, func(ctx context.Context) (err error) {
			info, err = r.ctl.DevInfo(ctx, d.cur.ID)
			if err == nil && d.rep.Info == nil {
				d.rep.Info = driverInfo(info) // the state before the fallback acted
			}
			if err == nil {
				d.dead = info.State == ublkctl.StateDead // the latest word: a DEAD device may be started since
			}
			return err
		})
		if errors.Is(infoErr, syscall.ENODEV) {
			r.goneFromDriver(d, start, infoErr)
			continue
		}
		if err := infoErr; err != nil {
			// Not fatal (STOP_DEV and DEL_DEV may still work), but what it
			// would have told is not known: whether the device is DEAD,
			// and its flags (UBLK_F_USER_RECOVERY: kept for the next
			// server when its daemon is gone).
			r.infoNotRead(d, start, err)
		}
		if why := awaitsRecovery(d, info, infoErr); gone && why != "" {
			d.rep.Steps = append(d.rep.Steps, StepResult{Name: "kept for recovery", Start: time.Now(), Result: why})
			r.cfg.logger.WarnContext(r.ctx, "ublk: a device left for the next server", "device", d.cur.DiskName(), "why", why)
			continue
		}
		if d.live() {
			var notSent string
			if d.stopped, notSent = r.stopDev(d, until); notSent != "" {
				continue // not the step's device any more: no DEL_DEV either
			}
		}
		if gone && !d.deleted {
			if why := r.idMoved(d); why != "" {
				r.notSent(d, "DEL_DEV", why)
				continue
			}
			if kernelrel.DelDevWaitsLocked(r.t.release) {
				r.notSent(d, "DEL_DEV", delDevWaitsLocked)
				d.delDevWithheld = true
				continue
			}
			d.deleted = r.delDev(d)
		}
	}
}

// infoNotRead records that GET_DEV_INFO for d, asked at start, failed
// (err): the driver's view of it is not known.
func (r *run) infoNotRead(d *devState, start time.Time, err error) {
	st := StepResult{Name: "GET_DEV_INFO", Start: start, Duration: time.Since(start), Err: err.Error(),
		Result: "the driver's view not read: its state and flags (UBLK_F_USER_RECOVERY) not known"}
	d.rep.Steps = append(d.rep.Steps, st)
	r.cfg.logger.WarnContext(r.ctx, "ublk: GET_DEV_INFO", "device", d.cur.ID, "result", st.Result, "err", err)
}

// goneFromDriver records that the driver answered GET_DEV_INFO for d,
// asked at start, ENODEV (err): no device has its ID, so d is gone
// (deleted since sysfs was read: by its daemon, an operator, the next
// pod's cleanup), what the step set out to do, not a read that failed.
// The driver frees an ID only after it has removed the device's disk and
// char device, so sysfs read again shows it gone, and the step sends it
// nothing more. Before, it was a failed read: a warning, the Report's
// step an error, and with its daemon gone and the old read's disk "kept
// for recovery" (docs/faults.md row 3080).
func (r *run) goneFromDriver(d *devState, start time.Time, err error) {
	d.rep.Steps = append(d.rep.Steps, StepResult{Name: "GET_DEV_INFO", Start: start, Duration: time.Since(start),
		Result: "gone: the driver has no device " + strconv.Itoa(d.cur.ID) + " (" + err.Error() + "), deleted since sysfs was read"})
	r.cfg.logger.InfoContext(r.ctx, "ublk: GET_DEV_INFO: the device is gone", "device", d.cur.DiskName())
	r.refresh()
	if d.cur.Present() {
		// Another device took the ID since (one whose sysfs entry refresh
		// could not tell from d's): not the step's.
		d.cur, d.gone = Device{ID: d.cur.ID}, true
	}
}

// delDevWaitsLocked is why the control sends no DEL_DEV on a kernel of
// 5.19 to 6.2 (kernelrel.DelDevWaitsLocked). Before, it sent one, and with
// the device's disk still open (a VMM's fd) the step stayed in it past its
// deadline until the opener closed, in D state (docs/faults.md row 3340).
const delDevWaitsLocked = "this kernel's DEL_DEV (5.19 to 6.2) waits for the device's last reference " +
	"uninterruptibly while it holds the driver's global lock (ublk_ctl_mutex): an opener of the disk would leave " +
	"the step's thread in D state, every control command on the node behind it, and the process unable to exit; " +
	"the device is left stopped (DEAD, harmless) with its ID, which a DEL_DEV frees once nothing holds its disk"

// errRemoved ends a DEL_DEV's wait once the device's char device has left
// sysfs (see delDev).
var errRemoved = errors.New("ublk: the device is removed; the driver frees it at its last reference")

// delDev sends d DEL_DEV (devStep, to the step's end) and reports whether
// it completed, or removed the device: the driver removes it first (its
// char device and disk leave sysfs, it is marked deleted), then waits for
// its last reference before it frees the ID, and that reference may be an
// opener of its disk that nothing the step does closes (a VMM's fd, kernel
// state the step stopped the device under). The driver frees the device
// on its own when that goes, so once the char device has left sysfs
// (looked at every poll) the step stops waiting and says so. Before, it
// waited to its deadline, and the Report's DEL_DEV said "not complete",
// not pending, the device "gone" (docs/faults.md row 3082).
func (r *run) delDev(d *devState) bool {
	removed := false
	done := r.devStep(d, "DEL_DEV", func(ctx context.Context) error {
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			r.awaitCharGone(ctx, d.cur.ID, func() { cancel(errRemoved) })
		}()
		err := r.ctl.DelDev(ctx, d.cur.ID)
		cancel(nil)
		<-watched
		if err != nil && errors.Is(context.Cause(ctx), errRemoved) && errors.Is(err, context.Canceled) {
			removed = true
			return nil
		}
		return err
	}, nil)
	if removed {
		d.rep.Steps[len(d.rep.Steps)-1].Result = "done: the device removed (its char device left sysfs); " +
			"the driver frees it, and its ID, once its last reference goes (an opener of its disk): not waited for"
	}
	return done
}

// awaitCharGone calls gone once device id's char device is not in sysfs,
// looked at every poll until ctx ends.
func (r *run) awaitCharGone(ctx context.Context, id int, gone func()) {
	tick := time.NewTicker(r.cfg.poll)
	defer tick.Stop()
	path := filepath.Join(r.cfg.sysRoot, charClassDir, "ublkc"+strconv.Itoa(id))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if there, err := exists(path); err == nil && !there {
			gone()
			return
		}
	}
}

// retell runs the pass that tells another server's devices again, for
// the step's devices not told yet (devState.untold) and still present,
// before the control fallback may stop or delete them: until the end of
// the stage it keeps time for (until; nil: the step's deadline), or the
// step's deadline if that is first, ownersWait without either (as
// procfsPass), and never past the step's end (its context cancelled):
// what it has not told by then the control leaves alone. Before, its end
// was the kill point alone, and the pass was not cancelled with the
// step: without a deadline (no kill point) nothing ended it, and on a
// slow procfs a step cancelled at 5 s stayed in the pass to 30 s, then
// sent the STOP_DEV of the device it told, after the step's end, where
// the daemon may be SIGKILLed; one cancelled before its kill point
// stayed in the pass to there. One told another server's leaves the step,
// named in the Report's note and the log as at discovery; one not told
// another's is the control's as any device of the step; one still not
// told is left to its daemon, which stops its own alone: its Report entry
// and the log say so, and the Report's note at the step's end. Before, a
// device the pass at discovery had not told in its 1 s was the daemon's,
// and the fallback stopped and deleted another server's live disk.
func (r *run) retell(until func(*stages) time.Time) {
	var states []*devState
	var devs []Device
	for _, d := range r.dev {
		if d.untold != "" && d.cur.Present() {
			states = append(states, d)
			devs = append(devs, d.cur)
		}
	}
	if len(devs) == 0 {
		return
	}
	if until == nil {
		until = endAt(time.Time{}) // to the deadline
	}
	ctx, cancel := r.procfsPass(until)
	defer cancel()
	defer context.AfterFunc(r.ctx, cancel)()
	start := time.Now()
	others, untold := othersDevices(ctx, r.cfg.sysRoot, r.cfg.procRoot, devs, daemonPID(r.cfg.daemon), r.cfg.beforeProcess, r.cfg.beforeCharRead)
	for _, d := range states {
		st := StepResult{Name: "whose", Start: start, Duration: time.Since(start)}
		why, other := others[d.cur.ID]
		switch {
		case other:
			st.Result = why // known not the daemon's: it keeps its mark, and dropOthers drops it
		case slices.Contains(untold, d.cur.ID):
			st.Result = "still not told from another server's device when the pass ended: the control fallback leaves it alone"
			r.cfg.logger.WarnContext(r.ctx, "ublk: control fallback: a device not known to be the daemon's left alone", "device", d.cur.DiskName())
		default:
			d.untold = ""
			st.Result = "told again: not another server's, the daemon's as the devices found first"
		}
		d.rep.Steps = append(d.rep.Steps, st)
	}
	r.dropOthers(others)
}

// dropOthers takes out of the step (its devices and the Report's) the
// devices retell told another server's, others, and notes each in the
// Report and the log as leaveOthers does (leaveAlone).
func (r *run) dropOthers(others map[int]string) {
	if len(others) == 0 {
		return
	}
	kept := r.dev[:0]
	reports := r.rep.Devices[:0]
	for _, d := range r.dev {
		if why, ok := others[d.cur.ID]; ok && !d.gone {
			r.leaveAlone(d.cur, why)
			r.toldAside(d.cur.ID, why)
			continue
		}
		kept = append(kept, d)
		reports = append(reports, *d.rep)
	}
	r.dev, r.rep.Devices = kept, reports
	for i, d := range r.dev {
		d.rep = &r.rep.Devices[i]
	}
}

// toldAside adds to the last resort's account of each possible holder it
// set aside from device id, which a later pass told another server's
// (why), that the device was then left alone: its fate said the control
// would not stop it while not known whose, and it is no longer the
// step's at all.
func (r *run) toldAside(id int, why string) {
	if r.rep.LastResort == nil {
		return
	}
	for i := range r.rep.LastResort.Holders {
		if f := &r.rep.LastResort.Holders[i]; f.aside && f.Device == id {
			f.Reason += "; then told another server's device (" + why + "): not the step's, not stopped"
		}
	}
}

// awaitsRecovery says why device d, its daemon gone, may be waiting for
// the next server to recover it, which STOP_DEV or DEL_DEV would destroy
// ("" when it is not): its state is QUIESCED or FAIL_IO (info, read now;
// infoErr its error), it has UBLK_F_USER_RECOVERY (info, or an earlier
// read), or its flags are not known (GET_DEV_INFO failed each time) and
// its disk is still there. A disk the kernel keeps when its daemon dies
// is a recovery device's; one without UBLK_F_USER_RECOVERY is stopped,
// DEAD, which no server recovers, and is deleted.
func awaitsRecovery(d *devState, info ublkctl.DevInfo, infoErr error) string {
	switch {
	case infoErr == nil && (info.State == ublkctl.StateQuiesced || info.State == ublkctl.StateFailIO):
		return "left " + info.State.String() + " for the next server to recover"
	case d.rep.Info != nil && d.rep.Info.Flags&ublkctl.FlagUserRecovery != 0:
		state := d.rep.Info.State
		if infoErr == nil {
			state = info.State.String()
		}
		return "UBLK_F_USER_RECOVERY: left " + state + " for the next server"
	case d.rep.Info == nil && d.cur.Disk:
		return "its flags not known (GET_DEV_INFO failed) and its disk still there: it may be quiesced for the next server " +
			"to recover (UBLK_F_USER_RECOVERY), which STOP_DEV or DEL_DEV would destroy"
	}
	return ""
}

// openControl opens the control device once; a failure is recorded once
// and returned again on later calls.
func (r *run) openControl() error {
	if r.ctl != nil || r.ctlErr != nil {
		return r.ctlErr
	}
	ctl, err := r.cfg.openControl(r.ctx)
	if err != nil {
		r.ctlErr = err
		r.causes = append(r.causes, err)
		r.rep.Note = joinNote(r.rep.Note, "control fallback unavailable: "+err.Error())
		return err
	}
	r.ctl = ctl
	return nil
}

// devStep runs one control command for d, bounded by the end of a stage
// (until, as Tighten moves it; nil: ctx alone), and records it. It returns whether the command completed; one that ended
// with its window, sent and its completion not seen, is pending: the
// driver does not cancel control commands, so it may still complete after
// the step, and the step says so instead of calling it failed.
func (r *run) devStep(d *devState, name string, f func(context.Context) error, until func(*stages) time.Time) (done bool) {
	start := time.Now()
	ctx, cancel := r.ctx, context.CancelFunc(func() {})
	if until != nil {
		ctx, cancel = r.stageCtx(r.ctx, until)
	}
	err := f(ctx)
	cancel()
	st := StepResult{Name: name, Start: start, Duration: time.Since(start), Result: "done"}
	switch {
	case err == nil:
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		when := fmt.Sprintf("the step was cancelled (%v)", ctx.Err())
		if end, ok := ctx.Deadline(); ok && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			when = fmt.Sprintf("its window ended (%s, %v)", end.Format(time.RFC3339Nano), ctx.Err())
		} else if errors.Is(context.Cause(ctx), errDeadlineMoved) {
			when = "its window ended, moved earlier with the step's deadline (Tighten)"
		}
		st.Result = "sent; not complete when " + when + ": the kernel runs it on, and may complete it after the step"
		d.pending = append(d.pending, name)
	default:
		st.Result, st.Err = "", err.Error()
		r.causes = append(r.causes, err)
	}
	d.rep.Steps = append(d.rep.Steps, st)
	r.cfg.logger.InfoContext(r.ctx, "ublk: "+name, "device", d.cur.ID, "result", st.Result, "err", err)
	return err == nil
}

// stopDev sends d STOP_DEV (devStep, bounded by until) unless its ID
// has moved (idMoved), and returns whether it completed, or why it was
// not sent.
func (r *run) stopDev(d *devState, until func(*stages) time.Time) (done bool, notSent string) {
	if notSent = r.idMoved(d); notSent != "" {
		r.notSent(d, "STOP_DEV", notSent)
		return false, notSent
	}
	return r.devStep(d, "STOP_DEV", func(ctx context.Context) error { return r.ctl.StopDev(ctx, d.cur.ID) }, until), ""
}

// idMoved says why d's ID no longer names the device the step read ("" when
// it still does, or when that is not known), from a read of its char
// device's sysfs entry just before a control command by that ID. STOP_DEV
// and DEL_DEV take an ID alone, and the kernel gives a deleted device's
// ID to the next ADD_DEV: a device deleted after the step last read it
// (by its daemon as the STOP_DEV of another device ran, or by anyone once
// its daemon is gone) may have left its ID to another server's new one,
// which the command would stop, or stop and delete, under its server.
// The driver has no command that acts on a device only if it is the one
// meant, so the read narrows the window to the time between it and the
// command. An entry not read at discovery (devState.entry 0), or not
// read now for a reason other than its absence, tells nothing: the step
// acts as before. Before, the fallback sent the commands of each device
// by the ID it had read, another server's disk by then.
func (r *run) idMoved(d *devState) string {
	if d.entry == 0 {
		return ""
	}
	e := charEntry(r.sysfs(), d.cur.ID)
	present, err := exists(filepath.Join(r.cfg.sysRoot, charClassDir, "ublkc"+strconv.Itoa(d.cur.ID)))
	switch {
	case e != 0 && e != d.entry:
		return "another device has ID " + strconv.Itoa(d.cur.ID) + " now (a new sysfs entry): the step's was deleted and the kernel gave its ID to the next ADD_DEV"
	case e == 0 && err == nil && !present:
		return "its char device is gone from sysfs: deleted, its ID free for the next ADD_DEV"
	}
	return ""
}

// notSent records in d's Report entry and the log that the control
// command name was not sent to d, and why.
func (r *run) notSent(d *devState, name, why string) {
	d.rep.Steps = append(d.rep.Steps, StepResult{Name: name, Start: time.Now(), Result: "not sent: " + why})
	r.cfg.logger.WarnContext(r.ctx, "ublk: "+name+" not sent", "device", d.cur.ID, "why", why)
}

// within calls f with the run's context, limited to the end of a stage
// (until, as Tighten moves it) when set.
func (r *run) within(until func(*stages) time.Time, f func(context.Context) error) error {
	if until == nil {
		return f(r.ctx)
	}
	ctx, cancel := r.stageCtx(r.ctx, until)
	defer cancel()
	return f(ctx)
}

// finish records the final state and verdicts and builds the error.
func (r *run) finish() error {
	r.close()
	r.waiting = false // no time left to tell a device found now from another server's
	if r.waitErr != nil {
		err := fmt.Errorf("the daemon's exit could not be watched: %w", r.waitErr)
		r.causes = append(r.causes, err)
		r.rep.Note = joinNote(r.rep.Note, err.Error())
		r.waitErr = nil
	}
	r.refresh()
	exited := r.daemonExited()
	if r.cfg.daemon != nil && r.exited == nil {
		// No exit watcher ran (the step ended before asking the daemon to
		// stop, as with a HeldError): look once, without waiting, so that a
		// daemon that died meanwhile is not reported left running.
		ctx, cancel := context.WithCancel(context.WithoutCancel(r.ctx))
		cancel()
		exited = r.cfg.daemon.Wait(ctx) == nil
	}
	if r.cfg.daemon != nil {
		r.rep.Daemon.Exited = exited
		r.rep.Daemon.LeftRunning = !exited
		if !exited && r.blind != nil {
			r.rep.Daemon.CannotTell = r.blind.Error()
			r.rep.Note = joinNote(r.rep.Note, fmt.Sprintf("the daemon was left running: whether it still serves a disk the step "+
				"does not have could not be read at its last look (first not read at +%v): %v", r.blindSince.Sub(r.start).Round(time.Millisecond), r.blind))
		}
	}
	if err := r.ctx.Err(); err != nil && !errors.Is(errors.Join(r.causes...), err) {
		r.causes = append(r.causes, err)
	}
	var unsafe, left []int
	worst, worstLeft := VerdictStopped, VerdictKilled
	for _, d := range r.dev {
		d.rep.Final = d.cur
		if d.readErr != nil {
			// Its final state is an old one: say so, and why.
			err := fmt.Errorf("%s: sysfs not read since +%v (%w): its final state is that of then", d.cur.DiskName(),
				d.readAt.Sub(r.start).Round(time.Millisecond), d.readErr)
			r.causes = append(r.causes, err)
			r.rep.Note = joinNote(r.rep.Note, err.Error())
			r.cfg.logger.WarnContext(r.ctx, "ublk: a device's sysfs not read at the step's end", "device", d.cur.DiskName(), "err", err)
		}
		if d.rep.Pending = d.pendingNow(); len(d.rep.Pending) > 0 {
			r.rep.Note = joinNote(r.rep.Note, fmt.Sprintf("%s: %s sent, not complete when the step ended: the kernel runs it on, "+
				"so the device may stop or go after the step; its verdict is what was known then", d.cur.DiskName(), strings.Join(d.rep.Pending, ", ")))
		}
		d.rep.InflightAfter = d.inflight
		if d.drained() && !d.cur.Disk {
			d.rep.InflightAfter = Inflight{} // STOP_DEV completed: every request was answered
		}
		d.rep.Verdict = r.verdict(d, exited)
		if d.untold != "" && d.cur.Present() {
			r.rep.Note = joinNote(r.rep.Note, fmt.Sprintf("%s: not known to be the daemon's (%s): the control neither stopped nor deleted it; "+
				"its verdict, %s, is as the daemon's", d.cur.DiskName(), d.untold, d.rep.Verdict))
		}
		if d.rep.Verdict == VerdictAbsent {
			// Not a device that went: one the step never saw. A list
			// that names IDs the daemon does not serve leaves its real
			// devices out of the step.
			r.rep.Note = joinNote(r.rep.Note, d.cur.DiskName()+": listed in Config.Devices, not in sysfs at any read: nothing of it was seen or stopped")
			r.cfg.logger.WarnContext(r.ctx, "ublk: a listed device was never in sysfs", "device", d.cur.DiskName())
		}
		switch d.rep.Verdict {
		case VerdictLeftLive:
			unsafe = append(unsafe, d.cur.ID)
		case VerdictKilled, VerdictOrphaned, VerdictNotStopped:
			left = append(left, d.cur.ID)
			if severity(d.rep.Verdict) > severity(worstLeft) {
				worstLeft = d.rep.Verdict
			}
		}
		if severity(d.rep.Verdict) > severity(worst) {
			worst = d.rep.Verdict
		}
	}
	r.rep.Verdict = worst
	r.rep.Duration = time.Since(r.start)
	if r.unconfirmed != nil && len(unsafe)+len(left) > 0 {
		// Taken as delivered, and the daemon did not stop its devices:
		// the request's silence is part of why (a hung daemon reads none).
		r.rep.Daemon.RequestError = r.unconfirmed.Error()
		r.causes = append(r.causes, r.unconfirmed)
	}
	cause := errors.Join(r.causes...)
	switch {
	case r.held != nil:
		return nil // the caller returns the HeldError
	case len(unsafe) > 0:
		return &UnsafeError{Devices: unsafe, Kernel: r.t.release, Class: r.t.class, Cause: cause}
	case len(left) > 0:
		return &IncompleteError{Devices: left, Verdict: worstLeft, Cause: cause}
	}
	return nil
}

func (r *run) verdict(d *devState, exited bool) Verdict {
	switch {
	case !d.seen:
		return VerdictAbsent
	case !d.cur.Present():
		if d.stopped || d.deleted {
			return VerdictStoppedByControl
		}
		return VerdictStopped
	case r.held != nil:
		if _, ok := r.held[d.cur.ID]; ok {
			return VerdictHeld
		}
		if d.stopped {
			return VerdictStoppedByControl // by the last resort, the daemon left serving the held ones
		}
		return VerdictNotStopped
	case d.delDevWithheld && d.drained():
		return VerdictStoppedByControl // all this kernel lets the step do safely
	case d.live() && r.cfg.daemon != nil && !exited && !r.t.class.MayKillWithLiveDevices():
		return VerdictLeftLive
	case r.killed && r.rep.Daemon.Killed:
		return VerdictKilled
	case exited:
		return VerdictOrphaned
	}
	return VerdictNotStopped
}

// close stops the exit watcher and releases the controller; idempotent.
func (r *run) close() {
	if r.stopWaiter != nil {
		r.stopWaiter()
		<-r.waiterDone
		r.stopWaiter = nil
	}
	if r.ctl != nil {
		if err := r.ctl.Close(); err != nil {
			r.cfg.logger.WarnContext(r.ctx, "ublk: closing the control device", "err", err)
		}
		r.ctl = nil
	}
}

func (r *run) summary() string {
	live, present := r.count()
	return fmt.Sprintf("%d present, %d live, daemon exited: %v", present, live, r.daemonExited())
}

func (r *run) stepStart(name string) StepResult {
	trace.SpanFromContext(r.ctx).AddEvent(name + " start")
	return StepResult{Name: name, Start: time.Now()}
}

// stepEnd records a finished step and returns err.
func (r *run) stepEnd(s StepResult, result string, err error) error {
	s.Duration, s.Result = time.Since(s.Start), result
	if err != nil {
		s.Err = err.Error()
	}
	r.rep.Steps = append(r.rep.Steps, s)
	attrs := []attribute.KeyValue{attribute.String(attrStepResult, result), attribute.Float64(attrStepDuration, s.Duration.Seconds())}
	if err != nil {
		attrs = append(attrs, attribute.String(attrStepError, err.Error()))
	}
	trace.SpanFromContext(r.ctx).AddEvent(s.Name, trace.WithAttributes(attrs...))
	r.cfg.logger.InfoContext(r.ctx, "ublk: "+s.Name, "result", result, "duration", s.Duration, "err", err)
	return err
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
