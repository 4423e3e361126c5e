package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/nodeend"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// The Events a Drainer with Config.Pod posts on the pod, by reason.
const (
	eventDrainStarted  = "DrainStarted"  // Normal: T0, the expected SIGKILL and the plan
	eventSandboxesLost = "SandboxesLost" // Warning: how many, and which (up to maxLostIDs); again for a step's sweep
	eventStepFinished  = "StepFinished"  // Normal: a step (the device teardown) ended ok; its verdict
	eventStepFailed    = "StepFailed"    // Warning: it did not
	eventDrainFinished = "DrainFinished" // Normal, or Warning when Report.Err is not nil
)

const (
	// podReadTimeout bounds each read of the pod's deletion.
	podReadTimeout = 2 * time.Second
	// podPoll is how often a drain that no preStop hook can tell of a
	// kubelet's new run reads the pod's deletion during the shutdown
	// (pollDeletion): a second, shorter deletion is seen this late at most.
	podPoll = time.Second

	// eventsFlushMax bounds how long Shutdown waits, once the Report is
	// made, for the events still queued; never more than half the time left
	// before SIGKILL.
	eventsFlushMax = time.Second
	// maxLostIDs is how many lost sandboxes the SandboxesLost event and
	// the Report's log line name.
	maxLostIDs = 20
)

// readPod reads the pod's deletion in the background and gives it to the
// budget (deletionRead): the grace a deletion gave (kubectl delete
// --grace-period, an eviction) can be shorter than the manifest's. A read
// that fails leaves the budget as it is. at says which event prompted it.
// Once stopPodReads was called (the Report is being made) no read starts:
// a repeated SIGTERM can come at any time.
func (d *Drainer) readPod(at string) { d.readPodThen(at, nil) }

// readPodThen is readPod, and then, once the read gave the budget what it
// found (or failed), calls then (nil: nothing) on the read's goroutine.
func (d *Drainer) readPodThen(at string, then func()) {
	if d.pod == nil {
		return
	}
	d.podMu.Lock()
	defer d.podMu.Unlock()
	if d.podDone {
		d.log.Debug("drain: the pod's deletion is not read: the drain has ended", "at", at)
		return
	}
	rerun := d.rerun // as of the read's start: an older read's grace is not the new run's
	d.podReads.Go(func() {
		d.readOnce(at, rerun)
		if then != nil {
			then()
		}
	})
}

// readOnce reads the pod's deletion once, for the hook's run rerun (zero:
// the first), and gives what it found to the budget. It reports whether
// the read failed, saying nothing of the deletion; a failed read that is
// neither a poll's nor a retry's is read again (retryRead).
func (d *Drainer) readOnce(at string, rerun time.Time) (failed bool) {
	defer d.mirrorAnswered()
	started := time.Now()
	ctx, cancel := context.WithTimeout(d.podCtx, podReadTimeout)
	defer cancel()
	del, err := d.pod.Deletion(ctx)
	switch {
	case err == nil:
		d.pollFails.OK()
		d.deletionRead(at, started, rerun, del)
	case errors.Is(err, kube.ErrNotTerminating):
		if errors.Is(err, kube.ErrStaticPod) {
			d.sayStatic(at, err)
		} else {
			d.podMu.Lock()
			d.undeleted = true // a deletion after this one can only shorten the kubelet's grace
			d.podMu.Unlock()
		}
		if at != atPoll || d.kubelet > 0 && !d.own.Load() {
			d.notDeleted(at, del.SpecGrace) // a poll only for what it can change
		}
	case d.podCtx.Err() != nil:
		// stopPodReads ended it: the drain is over, as it should be,
		// and nothing is wrong with the API server.
		d.log.Debug("drain: a read of the pod's deletion was stopped: the drain ended", "at", at, "error", err)
	case (errors.Is(err, kube.ErrPodReplaced) || kube.IsNotFound(err)) && d.podRemoved(at, err):
	case at == atPoll:
		if news, n := d.pollFails.Fail(failureKind(err)); news {
			d.log.Warn("drain: the pod's deletion could not be read during the shutdown: a second, shorter deletion would go unseen until a read succeeds",
				"error", err, "failures", n)
		}
		return true
	case at == atRetry:
		if news, n := d.pollFails.Fail(failureKind(err)); news {
			d.log.Warn("drain: the pod's deletion could not be read again: the budget stands until a read succeeds", "error", err, "failures", n)
		}
		return true
	default:
		d.log.Warn("drain: the pod's deletion could not be read: the budget stands", "at", at, "error", err, "read_again_every", podPoll)
		d.retryRead()
		return true
	}
	return false
}

// atRetry is the at of retryRead's reads.
const atRetry = "retry"

// retryRead reads the pod's deletion again every podPoll, after a read at a
// preStop call or at SIGTERM that failed (an API server restarting, a read
// timed out), until one says something of it or stopPodReads. Read once,
// a deletion's shorter grace (kubectl delete --grace-period, an eviction)
// missed at the call stayed out of the plan for the whole preStop wait: it
// ran on past that grace, the kubelet gave up on the hook, and SIGTERM
// left the preserves its 2 s. One retry at a time, and none while
// pollDeletion reads every second already; its failures are logged as the
// poll's, once until a read succeeds.
func (d *Drainer) retryRead() {
	d.podMu.Lock()
	defer d.podMu.Unlock()
	if d.podDone || d.retrying || d.blind {
		return
	}
	d.retrying = true
	d.podReads.Go(func() {
		defer func() {
			d.podMu.Lock()
			d.retrying = false
			d.podMu.Unlock()
		}()
		d.everySecond(func(rerun time.Time, polled bool) bool { return !polled && d.readOnce(atRetry, rerun) })
	})
}

// everySecond calls read every podPoll, with the hook's run then (rerun)
// and whether pollDeletion runs (blind), until stopPodReads or read
// returns false: the loop of pollDeletion's and retryRead's reads.
func (d *Drainer) everySecond(read func(rerun time.Time, blind bool) bool) {
	tick := time.NewTicker(podPoll)
	defer tick.Stop()
	for {
		select {
		case <-d.podCtx.Done():
			return
		case <-tick.C:
		}
		d.podMu.Lock()
		rerun, blind := d.rerun, d.blind
		d.podMu.Unlock()
		if !read(rerun, blind) {
			return
		}
	}
}

// failureKind is what tells one read's failure from another's for logging
// once: the API server's status, or that it was not reached. Not the text,
// which names a new connection's port every time.
func failureKind(err error) string {
	var apiErr *kube.APIError
	if errors.As(err, &apiErr) {
		return strconv.Itoa(apiErr.StatusCode)
	}
	return "unreached"
}

// podRemoved takes a read that found the pod gone from the API server (404)
// or another pod in its name. While this process runs, only a force
// deletion (kubectl delete --force --grace-period=0, the pod GC's for a
// node gone) removes it, and it reports true:
//
//   - before any deletion was read, the force deletion began the
//     termination: the API server writes the pod with a grace of 0 before
//     it removes it, and the kubelet, seeing that, raises it to 1 s (a
//     preStop hook's wait) and stops the container with its 2 s: SIGKILL 2 s
//     after SIGTERM, hook or not (measured under the real kubelet and API
//     server, internal/realkubelet's TestRealKubeletWithAPIServer/
//     force_deletion). SIGKILL is planned for T0 + 2 s, which the budget's
//     floor moves to SIGTERM + 2 s once SIGTERM comes. Only when the pod's
//     UID is known (kube.Config.UID, or an earlier read): a name the API
//     server never had reads the same 404, and that is a failed read, the
//     budget standing, and it reports false;
//   - once a deletion was read, the kubelet keeps its grace, unless it
//     restarts: a kubelet restarted then knows no such pod and stops the
//     container as an orphan's, with a grace of 1 s raised to its 2 s (its
//     HandlePodCleanups), a preStop hook or not. So SIGKILL is planned for
//     that earliest restart, as for a second deletion with no grace
//     (plannedForRestart).
//
// Neither when a read before the termination began found the name not
// naming this pod (misnamed): the name or the UID is wrong, and the read
// at the drain says no more than that one did. It reports true, the budget
// standing, logged at Error once. Nor for a static pod that no read found
// (kube.Identity.MirrorPending: a 404, POD_UID its config hash): the API
// server cannot force-delete a static pod, whose mirror pod the kubelet has
// not made yet or made again after a deletion (row 720), so the read could
// not find the pod and no more; it reports true, the budget standing (the
// grace from SIGTERM, which the kubelet gives), logged at Warn once. Nor
// for a static pod found through its mirror pod whose read finds another
// static pod's mirror pod in its name (another config hash): its manifest
// replaced under a kubelet that restarted, which stops it as an orphan's
// (orphaned); it reports true.
func (d *Drainer) podRemoved(at string, err error) bool {
	d.podMu.Lock()
	defer d.podMu.Unlock()
	if start := d.misnamed(); start != nil {
		switch {
		case d.misnamedSaid:
		case d.startID.MirrorPending():
			d.log.Error("drain: the pod is still not in the API server at the drain, as at start: "+msgNoMirror+
				"; this read is no force deletion, and the budget stands", "at", at, "error", err, "kill", d.budget.Kill())
		default:
			d.log.Error("drain: the pod's name does not name this pod, as a read before the termination found: "+msgMisnamed+
				"; this read is no force deletion, and the budget stands", "at", at, "error", err, "found_before", start, "kill", d.budget.Kill())
		}
		d.misnamedSaid = true
		return true
	}
	if d.pod.Identity().MirrorPending() {
		if !d.unfoundSaid {
			d.unfoundSaid = true
			d.log.Warn("drain: the pod could not be found in the API server, and no read found it before: "+msgUnfound+
				"; the API server cannot force-delete a static pod, so this read is no force deletion, and the budget stands", "at", at, "error", err, "kill", d.budget.Kill())
		}
		return true
	}
	if d.pod.Identity().Static && errors.Is(err, kube.ErrPodReplaced) {
		d.orphaned(at, err)
		return true
	}
	if d.delGrace == 0 {
		if d.pod.UID() == "" {
			return false
		}
		if changed := d.budget.Tighten(d.budget.Start().Add(deadline.MinimumGracePeriod)); changed {
			d.log.Warn("drain: the pod was removed from the API server before any read found its deletion (a force deletion: "+err.Error()+"): "+
				"the kubelet stops the container with its 2 s, so SIGKILL is planned 2 s after SIGTERM",
				"at", at, "kill", d.budget.Kill())
		}
		return true
	}
	d.plannedForRestart(at, 0, "the pod was removed from the API server while the kubelet terminates it (a force deletion: "+err.Error()+"): "+
		"a kubelet restarted now would kill the container as an orphan's, 2 s after it stops it")
	return true
}

// orphaned plans for a static pod whose read, after one found it through
// its own mirror pod, found another static pod's mirror pod under its name
// (another config hash: kube.ErrPodReplaced, err). The API server cannot
// force-delete a static pod, so that is no force deletion: its manifest was
// replaced (a new config hash, a new UID). A kubelet that runs through the
// replacement stops the old pod with its own spec's grace and keeps the old
// mirror pod until the old pod is terminated (the kubelet v1.34.4's
// HandlePodRemoves, allowStaticPodStart; measured once under the real
// kubelet and API server: TestAnotherStaticPodsMirrorPodIsAnotherPod), so no read of
// this pod finds the new mirror; a kubelet restarted since knows no such
// pod and stops it as an orphan's (HandlePodCleanups, a grace of 1 s raised
// to its 2 s, no preStop hook: its pod is the one the runtime lists, and
// containerd sends no second SIGTERM), while the new pod's SyncPod makes
// the new mirror. The two are not ordered (housekeeping and the pod worker
// run apart, and SyncPod returns before the mirror while the network is
// not ready), so no read tells when the kubelet stopped this pod: a read
// that still found this pod's own mirror can come after it. SIGKILL is
// planned for the earliest, 2 s after T0 (the budget's floor moves it to
// SIGTERM + 2 s once SIGTERM comes). Logged at Warn once. Called with podMu
// held.
func (d *Drainer) orphaned(at string, err error) {
	changed := d.budget.Tighten(d.budget.Start().Add(deadline.MinimumGracePeriod))
	if d.orphanSaid {
		return
	}
	d.orphanSaid = true
	d.log.Warn("drain: another static pod's mirror pod is under this pod's name (another config hash): this pod's manifest was replaced under a kubelet that restarted, "+
		"which stops this pod as an orphan's, SIGKILL 2 s after it stops it (the API server cannot force-delete a static pod, and a kubelet that did not restart "+
		"keeps this pod's mirror until this pod ends); no read shows when it restarted, so SIGKILL is planned 2 s after T0, the earliest",
		"at", at, "read", err, "tightened", changed, "kill", d.budget.Kill())
}

// msgStatic says what a static pod's drain plans with, and why.
const msgStatic = "a static pod, whose deletion the API server does not show: the kubelet stops it when its manifest is removed, with its grace from SIGTERM; " +
	"its mirror pod's deletion (kubectl delete --grace-period, --force) does not stop it, and the drain does not take it for this pod's"

// msgUnfound says what a static pod's name that names no pod in the API
// server, no read having found the pod, means at the drain.
const msgUnfound = EnvPodUID + " is a static pod's (its config hash), whose mirror pod the kubelet has not made (it has not reached the API server yet) " +
	"or not made again after a deletion, or " + EnvPodName + " is not its name"

// staticPod reports whether id, what the reads found, tells a static pod,
// whose deletion the API server does not show: a read found it through its
// mirror pod (Static), or none found any pod of the name while its UID,
// POD_UID, is a static pod's config hash (MirrorPending).
func staticPod(id kube.Identity) bool { return id.Static || id.MirrorPending() }

// sayStatic logs, once a read found the pod a static pod (kube.ErrStaticPod,
// err), what the drain plans with, unless the plan line at SIGTERM says it:
// a read before New found it (startID), or the plan line came first.
func (d *Drainer) sayStatic(at string, err error) {
	d.podMu.Lock()
	defer d.podMu.Unlock()
	if staticPod(d.startID) || d.staticSaid {
		return
	}
	d.staticSaid = true
	d.log.Info("drain: the pod is "+msgStatic, "at", at, "read", err, "kill", d.budget.Kill())
}

// saysStatic reports whether the plan line at SIGTERM says the pod is a
// static pod (staticPod): the reads before New told it, or one since,
// which sayStatic has not logged yet (the read at SIGTERM runs beside the
// plan line). The drain says it once.
func (d *Drainer) saysStatic() bool {
	d.podMu.Lock()
	defer d.podMu.Unlock()
	if staticPod(d.startID) {
		return true
	}
	if d.staticSaid || !staticPod(d.pod.Identity()) {
		return false
	}
	d.staticSaid = true
	return true
}

// msgMisnamed says what a read before the termination that found the
// pod's name not naming this pod means, and what to do.
const msgMisnamed = EnvPodName + " (kube.New's name) or " + EnvPodUID + " (kube.Config.UID) is not this pod's, so no deletion of this pod can be read; " +
	"set both from the Downward API (fieldRef metadata.name and metadata.uid)"

// misnamed returns the error of a read of the pod made before New (at
// start: ConfigFromEnv's of the spec), while no read had found the pod
// under its name with its UID, that found the name naming another pod or
// none (kube.Identity.Mismatch, kept by New in startID), or nil; nil too
// once a read found the pod. Made while the pod ran, that read shows the
// name or the UID is wrong: a running pod's name names it. Made later, at
// the drain, it may be a force deletion (podRemoved): the drain's own, or
// a HookGuard's RequireTerminating at the hook's call. New, not a time,
// divides the two: a clock stepped between start and drain moves no read
// across.
func (d *Drainer) misnamed() error {
	if d.startID.Mismatch == nil || d.pod.Identity().Confirmed {
		return nil
	}
	return d.startID.Mismatch
}

// msgNoMirror says what a static pod's name that names no pod in the API
// server means once the kubelet should have made its mirror pod, and what
// to do.
const msgNoMirror = "no mirror pod of this static pod (" + EnvPodUID + " is its config hash) under " + EnvPodName +
	": the kubelet has not made one (it cannot reach the API server) or " + EnvPodName + " is not its name (the manifest's, a dash, the node's: fieldRef metadata.name), " +
	"so no read can find this pod"

// sayPodIdentity keeps, at New, what the reads of the pod before it
// showed (misnamed), and logs what will limit the drain's: a name not
// naming this pod (Error), or a UID not known (Warn), with which a read
// that finds the pod gone cannot tell a force deletion from a name the API
// server never had. A static pod's name that names no pod yet is said at
// Info: the kubelet starts a static pod before it made its mirror pod, so
// a read at start can find none though nothing is wrong
// (kube.Identity.MirrorPending); the drain, which needs it, says it at
// Error if its read still finds none, and the Report has it (misnamed).
func (d *Drainer) sayPodIdentity() {
	id := d.pod.Identity()
	d.startID = id
	switch {
	case id.MirrorPending():
		d.mirrorRead = make(chan struct{})
		d.log.Info("drain: the pod is not in the API server yet: "+EnvPodUID+" is a static pod's (its config hash), whose mirror pod the kubelet makes once it reaches "+
			"the API server; a read at the drain finds the pod through it, and one that still finds no pod is an error", "pod", d.pod.Name(), "read", id.Mismatch)
	case id.Mismatch != nil && !id.Confirmed:
		d.log.Error("drain: a read of the pod found its name not naming this pod: "+msgMisnamed+
			"; a read at the drain that finds the pod gone, or another in its name, will not be taken for a force deletion", "error", id.Mismatch)
	case id.UID == "":
		d.log.Warn("drain: the pod's UID is not known (no "+EnvPodUID+", kube.Config.UID, and no read found the pod yet): if the drain's first read finds the pod gone, "+
			"a force deletion cannot be told from a name the API server never had: the drain plans with its grace, though the kubelet kills 2 s after SIGTERM; "+
			"set "+EnvPodUID+" from the Downward API (fieldRef metadata.uid)", "pod", d.pod.Name())
	}
}

// notDeleted takes a read of the pod that found no deletionTimestamp: the
// kubelet is terminating the pod on its own (graceful node shutdown, a
// node-pressure eviction, a failed liveness probe), with Config.KubeletGrace
// when it is declared, and with at most spec, the pod's
// terminationGracePeriodSeconds (zero: not read). A budget built with a
// longer grace than the spec's (a DRAINKIT_GRACE or a Budget that does not
// match the manifest) would plan the preStop wait past the kubelet's end
// of it; no deletionTimestamp comes to correct it.
func (d *Drainer) notDeleted(at string, spec time.Duration) {
	if d.kubelet > 0 {
		// Its grace, not the manifest's; it holds after SIGTERM too (d.own).
		d.own.Store(true)
		// tightened is SIGKILL's move, as every read says it; the node's
		// end may move the deadline alone (a kubelet grace within the 2 s
		// SIGKILL keeps after SIGTERM), which node_end and deadline show.
		tightened := d.tightenOwn()
		d.log.Warn("drain: the pod has no deletionTimestamp: the kubelet is terminating it on its own (graceful node shutdown, an eviction), with its grace",
			"at", at, "kubelet_grace", d.kubelet, "tightened", tightened, "node_end", d.budget.Start().Add(d.kubelet), "deadline", d.budget.Deadline(), "kill", d.budget.Kill())
	}
	if spec > 0 && spec < d.budget.Grace() {
		changed := d.budget.Tighten(d.budget.Start().Add(spec))
		d.log.Error("drain: the pod's spec.terminationGracePeriodSeconds is shorter than the grace the budget was built with: a termination the kubelet makes on its own gives at most the spec's; make them equal",
			"at", at, "spec_grace", spec, "budget_grace", d.budget.Grace(), "tightened", changed, "kill", d.budget.Kill())
		return
	}
	if d.kubelet == 0 && !d.pod.Identity().Static { // a static pod's never has one: sayStatic said so
		d.log.Info("drain: the pod has no deletionTimestamp (graceful node shutdown?): the budget stands; Config.KubeletGrace would give the kubelet's own grace", "at", at)
	}
}

// hookAgain records that the kubelet started the preStop hook again at
// start, and reads the pod's deletion: a kubelet that runs the hook again
// (a restarted one) runs the termination over, timing the deletion's grace
// from the new run.
func (d *Drainer) hookAgain(start time.Time) {
	if d.pod == nil {
		return
	}
	d.podMu.Lock()
	d.rerun = start
	d.podMu.Unlock()
	d.readPod("preStop again")
}

// deletionRead gives the budget a read of the pod's deletion that started
// after the hook's run at rerun (zero: the first run).
//
// The kubelet's termination keeps the grace it started with: a second,
// shorter deletion while it runs changes neither its hook's wait nor its
// SIGKILL (the kubelet v1.34's SyncTerminatingPod ignores the cancelled
// sync; measured under the real kubelet and API server,
// internal/realkubelet's TestRealKubeletWithAPIServer/shorter_deletion). The
// API server still moves the deletionTimestamp to the first deletion's
// time plus the new grace, which is then no SIGKILL at all. So the first
// read's deletion is the one the budget takes (Tighten; or, when its grace
// is longer than the budget's, longerRead moves SIGKILL later to it, as
// the kubelet gives it), and a later read
// that finds a shorter grace is logged and left alone, unless the hook
// ran again: then the kubelet did run the termination over (a restarted
// kubelet does, with the grace it reads), timed from the new run, and the
// budget follows that run (Budget.OnRestart) with the deletion's grace, at
// most the budget's own, or the first deletion's longer one the budget
// took. A read without deletionGracePeriodSeconds tightens as before.
//
// Unless no hook can show that run: a drain that had no preStop call
// before SIGTERM (no hook, a sleep hook, an exec hook that does not call
// the server) is blind to a kubelet restarted after the second deletion,
// which stops the container again with the new grace and kills it that
// long after (containerd sends no second SIGTERM; measured under the real
// kubelet, TestRealKubeletWithAPIServer/restart). So that drain plans for
// the earliest such restart (plannedForRestart): the second deletion came
// after the latest read that still found the first grace (started, at
// graceSeen), the restart after it, and SIGKILL at least the new grace
// later. Early when the kubelet does not restart, never late.
//
// A read that the hook's next run overtook is dropped: the run's own read
// decides.
func (d *Drainer) deletionRead(at string, started, rerun time.Time, del kube.Deletion) {
	d.podMu.Lock() // no run starts while its outcome is decided
	defer d.podMu.Unlock()
	if !d.rerun.Equal(rerun) {
		d.log.Debug("drain: a read of the pod's deletion is dropped: the kubelet ran the hook again since it started, and that run's read decides",
			"at", at, "deletion_timestamp", del.Timestamp, "grace", del.Grace)
		return
	}
	grace := min(del.Grace, d.budget.Grace())
	if d.longer { // the first run's grace: a run over reads no more
		grace = del.Grace
	}
	switch {
	case del.Grace > 0 && !rerun.IsZero():
		changed := d.budget.OnRestart(rerun, grace)
		d.log.Info("drain: the pod's deletion read after the kubelet ran the hook again: SIGKILL follows its new run, not the deletionTimestamp",
			"at", at, "run", rerun, "grace", grace, "deletion_timestamp", del.Timestamp, "changed", changed, "kill", d.budget.Kill())
	case del.Grace > 0 && d.delGrace > 0 && del.Grace < d.delGrace && d.blind:
		d.plannedForRestart(at, del.Grace, "a second deletion shortened the pod's grace while the kubelet terminates it, and no preStop hook tells this drain "+
			"when the kubelet runs the termination over: a kubelet restarted now would kill the container the new grace after its restart")
	case del.Grace > 0 && d.delGrace > 0 && del.Grace < d.delGrace:
		if !d.shortened {
			d.shortened = true
			d.log.Warn("drain: a second deletion shortened the pod's grace while the kubelet terminates it: the kubelet keeps the grace its termination started with, "+
				"so the budget stands (the deletionTimestamp, the first deletion's time plus the new grace, is not when it kills)",
				"at", at, "grace", del.Grace, "started_with", d.delGrace, "deletion_timestamp", del.Timestamp, "kill", d.budget.Kill())
		}
	default:
		if del.Grace > 0 && d.delGrace == 0 {
			d.delGrace = del.Grace
		}
		if del.Grace == d.delGrace && started.After(d.graceSeen) {
			d.graceSeen = started
		}
		changed := d.budget.Tighten(del.Timestamp)
		if !changed && del.Grace > d.budget.Grace() && del.Grace == d.delGrace && d.longerRead(at, del) {
			return
		}
		level := slog.LevelInfo
		if at == atPoll && !changed {
			level = slog.LevelDebug // a poll that found what the last one did
		}
		d.log.Log(context.Background(), level, "drain: the pod's deletion read", "at", at, "deletion_timestamp", del.Timestamp,
			"grace", del.Grace, "tightened", changed, "kill", d.budget.Kill())
	}
}

// longerRead takes a read of the pod's first deletion, del, whose grace is
// longer than the budget's (kubectl delete or kubectl drain
// --grace-period=600 on a pod whose manifest says 30). The kubelet gives
// it in full when that deletion began the termination: the kubelet
// v1.34.4's calculateEffectiveGracePeriod takes deletionGracePeriodSeconds
// for a pod not terminating yet, whatever the spec says, and the API
// server does not cap it by the spec; its hook waits that long, and
// SIGKILL comes that long after its T0, which the deletion preceded. So
// the budget moves SIGKILL later to the deletionTimestamp
// (Budget.OnRestart at the deletion's time, the timestamp less its grace,
// in this node's clock as the read corrects it), where planning with the
// manifest's put it 570 s early and lost every sandbox the first 30 s
// could not preserve. A later, shorter deletion changes nothing (the
// kubelet keeps the grace its termination started with), and a run over
// reads no more than this one (the API server only shortens it).
//
// Unless that is not sure (notLonger): then the budget keeps its own,
// early, and that is logged at Warn once. longerRead reports whether the
// budget moved (it logged that at Info); false leaves the caller's line
// to say the read. Called with podMu held.
func (d *Drainer) longerRead(at string, del kube.Deletion) bool {
	if why := d.notLonger(del); why != "" {
		if !d.longerSaid {
			d.longerSaid = true
			d.log.Warn("drain: the pod's deletion gives a grace longer than the budget's, which the kubelet gives in full when the deletion began the termination, but "+
				why+": the budget keeps its own (SIGKILL early, never late)",
				"at", at, "grace", del.Grace, "budget_grace", d.budget.Grace(), "deletion_timestamp", del.Timestamp, "kill", d.budget.Kill())
		}
		return false
	}
	if !d.budget.OnRestart(del.Timestamp.Add(-del.Grace), del.Grace) {
		return false // read again, or the kubelet gave up on the hook: its grace ran out
	}
	d.longer = true
	d.log.Info("drain: the pod's deletion gives a grace longer than the budget's, which the kubelet gives in full: SIGKILL follows its deletionTimestamp",
		"at", at, "grace", del.Grace, "budget_grace", d.budget.Grace(), "deletion_timestamp", del.Timestamp, "kill", d.budget.Kill())
	return true
}

// notLonger says why the budget must not take del's longer grace, or
// returns "": the read must be of this pod (its UID known before the
// drain: POD_UID, or a read at start), and its deletion must be what
// began the termination. A termination the kubelet began on its own
// (graceful node shutdown, an eviction: no deletionTimestamp) keeps its
// grace, which a deletion after it can only shorten: a read found the pod
// not deleted, or the deletion was made after T0. Called with podMu held.
func (d *Drainer) notLonger(del kube.Deletion) string {
	id := d.pod.Identity()
	switch made := del.Timestamp.Add(-del.Grace); {
	case !id.Confirmed || !id.Configured && d.startID.UID == "":
		return "the pod's UID was not known before the drain (set " + EnvPodUID + " from the Downward API, fieldRef metadata.uid), so the deletion read may be another pod's of its name"
	case d.undeleted:
		return "a read found the pod with no deletionTimestamp first: the kubelet began the termination on its own (graceful node shutdown, an eviction), and a deletion after that can only shorten its grace"
	case made.After(d.budget.Start()):
		return fmt.Sprintf("the deletion was made %v after T0: the kubelet began the termination before it (graceful node shutdown, an eviction), and a deletion after that can only shorten its grace",
			made.Sub(d.budget.Start()).Round(time.Millisecond))
	}
	return ""
}

// plannedForRestart moves SIGKILL, never later, to the earliest a kubelet
// restarted after a change of the pod that its reads found (a shorter
// deletion's grace, or none) could kill: the start of the latest read that
// found the first grace (or T0), plus grace, at least the kubelet's 2 s.
// why says what changed; it is logged at Warn when SIGKILL moves. See
// deletionRead. Called with podMu held.
func (d *Drainer) plannedForRestart(at string, grace time.Duration, why string) {
	after := d.graceSeen
	if after.IsZero() {
		after = d.budget.Start()
	}
	changed := d.budget.Tighten(after.Add(max(grace, deadline.MinimumGracePeriod)))
	if !changed {
		d.log.Debug("drain: a shorter deletion read again", "at", at, "grace", grace, "kill", d.budget.Kill())
		return
	}
	d.log.Warn("drain: "+why+", so SIGKILL is planned for the earliest such restart (early if the kubelet keeps the first grace, as it does when it does not restart)",
		"at", at, "grace", grace, "started_with", d.delGrace, "changed_after", after, "kill", d.budget.Kill())
}

// atPoll is the at of pollDeletion's reads.
const atPoll = "poll"

// pollDeletion reads the pod's deletion every podPoll until stopPodReads,
// for a drain that no preStop call can tell of the kubelet's new run (see
// deletionRead): only a read shows it a second, shorter deletion. One read
// at a time; a failure is logged at Warn once until a read succeeds again.
func (d *Drainer) pollDeletion() {
	if d.pod == nil {
		return
	}
	d.podMu.Lock()
	defer d.podMu.Unlock()
	if d.podDone {
		return
	}
	d.blind = true
	d.podReads.Go(func() {
		d.everySecond(func(rerun time.Time, _ bool) bool {
			d.readOnce(atPoll, rerun)
			return true
		})
	})
}

// tightenOwn moves SIGKILL to T0 + Config.KubeletGrace, never later, once
// a read found the kubelet terminating the pod on its own. That is the
// end, whatever the kubelet's arithmetic after SIGTERM says (G' less the
// hook's whole seconds, at least 2 s): under graceful node shutdown the
// kubelet lets the node go down at its slice's end, with a container it
// gave up on still inside its last 2 s (docs/real-kubelet.md, "Graceful
// node shutdown"). The budget keeps its one floor for SIGKILL, SIGTERM +
// 2 s, which only a SIGTERM in the slice's last 2 s reaches; the node's
// end, which has none, keeps the budget's deadline before it then
// (internal/nodeend), so that no phase, the device teardown least of all,
// is laid out after the node went down. It reports whether SIGKILL moved,
// not whether the node's end moved the deadline alone.
func (d *Drainer) tightenOwn() (killMoved bool) {
	end := d.budget.Start().Add(d.kubelet)
	killMoved = d.budget.Tighten(end)
	nodeend.Set(d.budget, end)
	return killMoved
}

// stopPodReads ends the reads still running and waits for them: once it
// returns, no read tightens the budget again (Shutdown has started, so no
// preStop call starts another). It first gives a static pod's first read at
// the drain its answer (awaitMirrorRead).
func (d *Drainer) stopPodReads() {
	if d.pod == nil {
		return
	}
	d.awaitMirrorRead()
	d.podMu.Lock()
	d.podDone = true
	d.podMu.Unlock()
	d.podStop()
	d.podReads.Wait()
}

// awaitMirrorRead waits, when the reads at start found a static pod's mirror
// pod not made yet (kube.Identity.MirrorPending) and none since found the
// pod, for a read at the drain to run to its end (mirrorAnswered), at most
// podReadTimeout and half the time left before SIGKILL, and no longer once
// Force was called. The Report says pod_mismatch, an error, by what the reads
// found: a drain over before its read at SIGTERM answered (no sandboxes, a
// few milliseconds) reported the mirror pod the kubelet had made since as
// missing, and exited 1.
func (d *Drainer) awaitMirrorRead() {
	if d.mirrorRead == nil || d.pod.Identity().Confirmed {
		return
	}
	t := time.NewTimer(max(min(podReadTimeout, time.Until(d.budget.Kill())/2), 0))
	defer t.Stop()
	select {
	case <-d.mirrorRead:
	case <-t.C:
	case <-d.force.Done():
	}
}

// mirrorAnswered tells awaitMirrorRead that a read of the pod ran to its
// end, whatever it found.
func (d *Drainer) mirrorAnswered() {
	if d.mirrorRead != nil {
		d.mirrorOnce.Do(func() { close(d.mirrorRead) })
	}
}

// event records an Event on the pod, if there is one. It never blocks.
func (d *Drainer) event(typ, reason, action, note string) {
	if d.pod != nil {
		d.pod.Record(kube.Event{Type: typ, Reason: reason, Action: action, Note: note})
	}
}

// eventStarted posts DrainStarted: how termination began and the plan from
// the first phase still to run, as the drain runs it (windowsFrom).
func (d *Drainer) eventStarted(how, from string) {
	if d.pod == nil {
		return
	}
	st := d.budget.State()
	var b strings.Builder
	fmt.Fprintf(&b, "%s at %s; SIGKILL expected at T0+%v (grace %v, margin %v). Plan:",
		how, st.Start.UTC().Format(time.RFC3339Nano), rel(st.Kill, st.Start), d.budget.Grace(), d.budget.Margin())
	for _, w := range d.windowsFrom(from) {
		fmt.Fprintf(&b, " %s until T0+%v", w.Name, rel(w.Deadline, st.Start))
		if w.Reserve > 0 {
			fmt.Fprintf(&b, " (reserve %v)", w.Reserve.Round(time.Millisecond))
		}
		b.WriteString(";")
	}
	if d.counted.Load() {
		fmt.Fprintf(&b, " %d sandboxes running.", d.Running())
	}
	d.event(kube.Normal, eventDrainStarted, "Drain", strings.TrimSuffix(b.String(), ";"))
}

// eventLost posts SandboxesLost when the preserve phase lost sandboxes,
// never learned which there were or whether it listed them all, or left
// no report of the ones the drain counted.
func (d *Drainer) eventLost(rep *Report) {
	pr := rep.Preserve
	if d.pod == nil {
		return
	}
	if pr == nil {
		if p := rep.Phase(PhasePreserve); rep.Unaccounted > 0 && p != nil {
			d.event(kube.Warning, eventSandboxesLost, "Preserve", fmt.Sprintf(
				"%d sandboxes unaccounted for: the drain counted them running, and the preserve phase %s: %s",
				rep.Unaccounted, p.Result, p.Error))
		}
		return
	}
	if pr.Unknown {
		d.event(kube.Warning, eventSandboxesLost, "Preserve", "sandboxes unknown: no listing succeeded: "+pr.ListErr)
		return
	}
	var notes []string
	if pr.Lost() > 0 {
		notes = append(notes, lostNote(pr))
	}
	if pr.Incomplete { // said even with none lost: the listing may have missed some
		notes = append(notes, "no listing was complete, the node may have sandboxes not listed: "+pr.ListErr)
	}
	if len(notes) > 0 {
		d.event(kube.Warning, eventSandboxesLost, "Preserve", strings.Join(notes, "; "))
	}
}

// lostNote says how many of pr's sandboxes were not preserved, and which
// (up to maxLostIDs).
func lostNote(pr *pause.Report) string {
	return fmt.Sprintf("%d of %d sandboxes not preserved: %s", pr.Lost(), len(pr.Entries), lostIDs(pr))
}

// lostIDs names pr's sandboxes that were not preserved, each with its
// outcome, up to maxLostIDs and then how many more.
func lostIDs(pr *pause.Report) string {
	lost := pr.Lost()
	var ids []string
	for _, e := range pr.Entries {
		if !e.Outcome.Lost() {
			continue
		}
		if len(ids) == maxLostIDs {
			ids = append(ids, fmt.Sprintf("and %d more", lost-maxLostIDs))
			break
		}
		ids = append(ids, e.String())
	}
	return strings.Join(ids, " ")
}

// eventStep posts how a step ended, with what its Detail says of itself
// (the ublk step's verdict per device) when it is a fmt.Stringer.
func (d *Drainer) eventStep(p PhaseReport) {
	if d.pod == nil {
		return
	}
	typ, reason := kube.Normal, eventStepFinished
	if p.Result != OK {
		typ, reason = kube.Warning, eventStepFailed
	}
	note := fmt.Sprintf("step %s: %s in %v", p.Name, p.Result, p.Duration.Round(time.Millisecond))
	if p.Error != "" {
		note += ": " + p.Error
	}
	if text := detailText(p.Detail); text != "" {
		note += "\n" + text
	}
	d.event(typ, reason, p.Name, note)
}

// finishEvents posts DrainFinished, waits a bounded time for the events
// still queued and returns what became of them. The Report is already
// made: the wait only delays the process's exit, at most eventsFlushMax and
// never more than half the time left before SIGKILL.
func (d *Drainer) finishEvents(rep *Report) *kube.EventStats {
	if d.pod == nil {
		return nil
	}
	typ := kube.Normal
	var b strings.Builder
	switch pr := rep.Preserve; {
	case pr == nil && rep.Unaccounted > 0:
		fmt.Fprintf(&b, "%d sandboxes unaccounted for (the preserve phase left no report); ", rep.Unaccounted)
	case pr == nil:
	case pr.Unknown:
		b.WriteString("sandboxes unknown (no listing succeeded); ")
	default:
		fmt.Fprintf(&b, "%d of %d sandboxes preserved, %d lost; ", pr.Counts[pause.Preserved], len(pr.Entries), pr.Lost())
	}
	if rep.Headroom >= 0 {
		fmt.Fprintf(&b, "finished %v before the expected SIGKILL.", rep.Headroom.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "finished %v AFTER the expected SIGKILL.", (-rep.Headroom).Round(time.Millisecond))
	}
	b.WriteString(" Phases:")
	for _, p := range rep.Phases {
		fmt.Fprintf(&b, " %s %s in %v;", p.Name, p.Result, p.Duration.Round(time.Millisecond))
	}
	if err := rep.Err(); err != nil {
		typ = kube.Warning
		b.WriteString(" " + strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	d.event(typ, eventDrainFinished, "Drain", strings.TrimSuffix(b.String(), ";"))

	wait := min(eventsFlushMax, time.Until(rep.Budget.Kill)/2)
	ctx, cancel := context.WithTimeout(context.Background(), max(wait, 0))
	defer cancel()
	stats := d.pod.Flush(ctx)
	if stats.Dropped > 0 {
		d.log.Warn("drain: Kubernetes Events dropped", "posted", stats.Posted, "dropped", stats.Dropped, "last_error", stats.LastError)
	}
	return &stats
}

// rel is t - t0 rounded to the millisecond.
func rel(t, t0 time.Time) time.Duration { return t.Sub(t0).Round(time.Millisecond) }
