package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/pause"
)

// The states a sandbox goes through.
const (
	Creating = "creating"
	Running  = "running"
	Pausing  = "pausing"
	Paused   = "paused"
	Resuming = "resuming"
	Deleting = "deleting"
	// Died is a sandbox its runtime found dead (ErrDied) and whose remains could not be
	// removed: it runs no more, and nothing can pause or resume it. A Delete, or its
	// timeout, removes what it left. A dead sandbox whose remains went is forgotten.
	Died = "died"
	// Lost is a sandbox stopped by a pause that failed (ErrLost): its state is gone, and
	// nothing can pause or resume it. It stays listed so that its client, and a drain,
	// are told it was lost rather than that it never was; a Delete, or its timeout,
	// removes it.
	Lost = "lost"
)

var (
	// ErrNotFound: no sandbox has the ID.
	ErrNotFound = errors.New("sandbox not found")
	// ErrConflict: the sandbox is not in a state that allows the operation.
	ErrConflict = errors.New("sandbox is in the wrong state")
	// ErrUnrecorded: a pause whose record could not be written, and whose undo
	// failed: the sandbox stays paused with no record, lost when the process
	// ends unless a drain records it (Node.Running lists it: its image is
	// durable, only its record is missing); a client's pause cannot (it is no
	// longer running).
	ErrUnrecorded = errors.New("sandbox paused but neither recorded nor resumed: lost at exit")
)

// MaxTimeoutS is the largest timeout a sandbox may have: ten years, in seconds. Larger
// ones would overflow time.Duration (at about 292 years) and fire at once.
const MaxTimeoutS = 10 * 365 * 24 * 3600

// Info is what the server says about one sandbox.
type Info struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	TimeoutS int    `json:"timeout_s,omitempty"`
}

type entry struct {
	Info
	image string
	timer *time.Timer // ends a running sandbox at its timeout
	// unrecorded says why a sandbox listed paused has no record (ErrUnrecorded,
	// ErrNotDurable): it is lost at exit unless a drain records it (Preserve). Nil for
	// every other sandbox.
	unrecorded error
}

// recordStore is what a Node needs of its records: a *store.Store, or in tests one
// that fails.
type recordStore interface {
	Put(store.Record) error
	Delete(id string) error
	Load() ([]store.Record, []store.Problem, error)
}

// A Node is the sandboxes of one server over a Runtime and a record store. It is safe for
// concurrent use. Make one with NewNode and Close it when done.
type Node struct {
	rt     Runtime
	st     recordStore
	logger *slog.Logger

	mu     sync.Mutex
	sbs    map[string]*entry
	closed bool
	// settled is closed, and replaced, whenever a sandbox leaves a transition
	// (creating, pausing, resuming, deleting): Preserve waits on it.
	settled chan struct{}
	wg      sync.WaitGroup // timeouts in progress
	// timingOut holds the sandboxes whose timeout is in progress (its delete), for
	// CloseWithin's error.
	timingOut map[string]bool
	// checkpointing holds the sandboxes whose checkpoint, left running by a server
	// before this one, AdoptCheckpoints stopped waiting for: SweepOrphans passes them
	// over.
	checkpointing map[string]bool
	ids           *mrand.Rand // SeedIDs's generator; nil: crypto/rand
}

// NewNode returns a Node over rt whose paused sandboxes are the good records in st, and the
// records it did not load because they are damaged. logger may be nil.
func NewNode(rt Runtime, st *store.Store, logger *slog.Logger) (*Node, []store.Problem, error) {
	if rt == nil || st == nil {
		return nil, nil, errors.New("sandbox: NewNode needs a Runtime and a Store")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	recs, problems, err := st.Load()
	if err != nil {
		return nil, nil, err
	}
	n := &Node{rt: rt, st: st, logger: logger, sbs: map[string]*entry{}, settled: make(chan struct{})}
	for _, r := range recs {
		switch {
		case r.Runtime != rt.Name():
			problems = append(problems, store.Problem{Path: r.ID,
				Err: fmt.Sprintf("record of runtime %q, server runs %q", r.Runtime, rt.Name())})
			continue
		case r.TimeoutS <= 0 || r.TimeoutS > MaxTimeoutS:
			problems = append(problems, store.Problem{Path: r.ID,
				Err: fmt.Sprintf("timeout_s %d is outside [1, %d]", r.TimeoutS, MaxTimeoutS)})
			continue
		}
		// The image is where the runtime puts it, never where the record says: a crafted
		// record must not make resume read, then delete, a file outside the state dir.
		image := rt.Image(r.ID)
		if r.Image != "" && r.Image != image {
			logger.Warn("sandbox record names another image path; using the runtime's own",
				"id", r.ID, "record_image", r.Image, "image", image)
		}
		n.sbs[r.ID] = &entry{Info: Info{ID: r.ID, State: Paused, TimeoutS: r.TimeoutS}, image: image}
	}
	for _, p := range problems {
		logger.Warn("sandbox record not loaded", "path", p.Path, "incomplete", p.Incomplete, "error", p.Err)
	}
	return n, problems, nil
}

// Close stops the sandboxes' timeout timers and waits for timeouts in progress. It leaves
// the sandboxes as they are.
func (n *Node) Close() { _ = n.CloseWithin(context.Background()) }

// CloseWithin is Close whose wait for the timeouts in progress ends with ctx: each is a
// delete (runsc delete -force, 30 s at most), which a sandbox process stuck in the kernel
// or a hung images volume can hold that long, and a server closed at its exit must exit
// before the kubelet's SIGKILL. When ctx ends first it returns an error naming the
// sandboxes whose deletes still run, and leaves them running; nil when none does, ctx
// ended already or not.
func (n *Node) CloseWithin(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true
	for _, e := range n.sbs {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	n.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.wg.Wait()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	n.mu.Lock()
	ids := slices.Sorted(maps.Keys(n.timingOut))
	n.mu.Unlock()
	if len(ids) == 0 {
		// The wait raced ctx, ended already when none was in progress (row 3541): a
		// timeout's delete leaves timingOut only once it has ended.
		return nil
	}
	return fmt.Errorf("the deletes of sandboxes whose timeout passed (the runtime's Destroy: runsc delete -force) still ran when the wait for them ended (%w): %v; left running, not waited for",
		context.Cause(ctx), ids)
}

// Create starts a new sandbox that the node deletes after timeoutS seconds of running.
// A create that fails removes what it left; when that fails too, an ERROR line and its
// error name the sandbox and both failures.
func (n *Node) Create(ctx context.Context, timeoutS int) (Info, error) {
	if timeoutS <= 0 || timeoutS > MaxTimeoutS {
		return Info{}, fmt.Errorf("%w: timeout_s must be in [1, %d]", ErrConflict, MaxTimeoutS)
	}
	n.mu.Lock()
	id := n.newID()
	e := &entry{Info: Info{ID: id, State: Creating, TimeoutS: timeoutS}}
	n.sbs[id] = e
	n.mu.Unlock()
	if err := n.rt.Create(ctx, id); err != nil {
		n.forget(id)
		// A create can fail having started something (runsc run's container, then its
		// client killed): what it left goes, or is said to stay. The node no longer lists
		// the sandbox, so no Delete nor the server's Close reaches it.
		if derr := n.rt.Destroy(context.WithoutCancel(ctx), id); derr != nil {
			n.logger.Error("failed create left what it started: removing it failed, it may run on, listed nowhere",
				"id", id, "create_error", err, "destroy_error", derr)
			return Info{}, fmt.Errorf("create: %w; and removing what it left of %s failed: %w", err, id, derr)
		}
		return Info{}, fmt.Errorf("create: %w", err)
	}
	if k, ok := n.rt.(timeoutKeeper); ok {
		if err := k.keepTimeout(id, timeoutS); err != nil {
			n.logger.Warn("sandbox's timeout not kept beside it: a server after this one that records a checkpoint of it this one left running gives it a day's",
				"id", id, "error", err)
		}
	}
	return n.setRunning(e), nil
}

// Pause pauses a running sandbox and persists its record. A sandbox an earlier pause left
// paused with no record (ErrUnrecorded) has its record written; one left in an image that
// is not durable (ErrNotDurable) fails for good. If the runtime fails (or ctx ends) the
// sandbox stays running, but for these failures, after which the node says what the
// runtime left:
//
//   - ErrDied (the sandbox had died: its workload exited, its sandbox process was killed
//     or crashed): the node destroys what it left, within ctx, and forgets it, with a
//     WARN line saying why it died; a destroy that fails is an ERROR line and leaves it
//     listed Died, for a Delete or its timeout. Listed running, it was checkpointed again
//     by every drain's pass and by its client, its timeout armed for a dead sandbox.
//   - ErrNotDurable (stopped, its state in an image that is not durable): it is paused in
//     that image, with no record (one must never point at an image a crash may lose),
//     which a Resume restores while this process lives; an ERROR line says it is lost at
//     the process's end otherwise.
//   - ErrLost (stopped by its failed pause, its state gone): the node removes what it left
//     and lists it Lost, with an ERROR line, until a Delete or its timeout; the error is
//     permanent, and a drain counts the sandbox lost, never vanished.
//   - ErrUnverified (stopped, its state saved in an image that cannot be read): it is
//     paused and recorded as by a pause that succeeded, and Pause returns its Info with
//     the error, which an ERROR line says too: a drain counts it failed, with why, where
//     it said preserved of a save not known to hold a workload that runs (row 1781).
func (n *Node) Pause(ctx context.Context, id string) (Info, error) {
	if info, done, err := n.recordUnrecorded(id); done { // paused by an earlier pause, with no record
		if err != nil {
			return Info{}, fmt.Errorf("pause %s: %w", id, err)
		}
		return info, nil
	}
	e, err := n.transition(id, Running, Pausing)
	if err != nil {
		return Info{}, err
	}
	image, err := n.rt.Pause(ctx, id)
	var unverified error
	switch {
	case errors.Is(err, ErrUnverified): // paused and saved, the save not known to hold a workload that runs
		unverified, err = err, nil
	case errors.Is(err, ErrDied):
		return Info{}, n.died(ctx, e, "pause", err)
	case errors.Is(err, ErrLost):
		return Info{}, fmt.Errorf("pause %s: %w", id, n.lost(ctx, e, err))
	case errors.Is(err, ErrNotDurable):
		err = fmt.Errorf("pause %s: %w", id, err)
		n.setUnrecorded(e, n.rt.Image(id), err)
		n.logger.Error("sandbox stopped in an image that is not durable: listed paused, unrecorded; lost at exit unless resumed",
			"id", id, "error", err)
		return Info{}, err
	case err != nil: // the runtime left it running
		n.setRunning(e)
		return Info{}, fmt.Errorf("pause %s: %w", id, err)
	}
	if err := n.record(e, image); err != nil {
		// Paused without a record, the sandbox would be lost with the process while the
		// node said otherwise: undo the pause, so that it runs as the node says and a
		// retry pauses it again. An undo that fails leaves it paused and unrecorded.
		if uerr := n.rt.Resume(context.WithoutCancel(ctx), id, image); uerr != nil {
			err = fmt.Errorf("pause %s: %w: %w (and resuming it failed: %w)", id, ErrUnrecorded, err, uerr)
			n.setUnrecorded(e, image, err)
			n.logger.Error("sandbox paused but neither recorded nor resumed: lost at exit unless a drain records it",
				"id", id, "error", err)
			return Info{}, err
		}
		// No record names the image: kept, it held its size of the images volume, and
		// another sandbox's checkpoint failed for want of space, that sandbox lost (row 3261).
		n.dropImage(id)
		n.setRunning(e)
		return Info{}, fmt.Errorf("pause %s: %w", id, err)
	}
	info := n.setPaused(e, n.rt.Image(id))
	if unverified != nil {
		n.logger.Error("sandbox paused and recorded, but its image cannot be read: whether it saved a workload that runs is not known; a resume tells",
			"id", id, "error", unverified)
		return info, fmt.Errorf("pause %s: %w", id, unverified)
	}
	return info, nil
}

// Resume starts a paused sandbox again and removes its record. Its context keeps a
// resume from starting, never cuts one short: `runsc restore` starts gVisor's sandbox
// process (runsc-sandbox and its gofer), which restores the image, and killing the runsc
// client once it had (the caller's deadline, a client gone) left that process running
// with the restored memory and no container in runsc's state: the node said "paused",
// `runsc delete` found nothing, and it ran until the server ended, per resume given up.
// A started resume takes as long as the runtime takes; it ends with the sandbox
// running, as the node then says.
//
// The runtime resumes first, and the record goes after: a record is what the next server
// brings back (NewNode loads every record as a paused sandbox; an image with no record
// is never looked at), and until the resume has succeeded the image it names is the
// state the client knows. A process killed in the middle (the kubelet's SIGKILL during a
// restore) thus comes back with the sandbox paused, as before a resume no one was told
// of; a record removed first would have gone with the process's half-resumed sandbox, and
// the sandbox with it. A record that cannot be removed once the sandbox runs is stale:
// the next server would bring the sandbox back paused from its image of before the
// resume, everything since lost without a word. The resume is then undone: the sandbox
// is paused again and recorded anew, so that its record and its image are its state now,
// and Resume fails naming the record. An undo that fails too is logged at ERROR and
// Resume's error names both failures, and what the sandbox is left as.
//
// A sandbox whose image restores nothing that runs (ErrDied: its checkpoint caught its
// workload exiting, saved by a server older than row 1392's) is removed as Pause removes
// a dead one, its record with it: restored, it was listed running while runsc said
// stopped.
func (n *Node) Resume(ctx context.Context, id string) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("resume %s: %w", id, err)
	}
	e, err := n.transition(id, Paused, Resuming)
	if err != nil {
		return Info{}, err
	}
	if err := n.rt.Resume(context.WithoutCancel(ctx), id, e.image); errors.Is(err, ErrDied) {
		return Info{}, n.died(ctx, e, "resume", err) // its image restores nothing
	} else if err != nil {
		n.setPaused(e, e.image) // its image, as before the resume
		return Info{}, fmt.Errorf("resume %s: %w", id, err)
	}
	if err := n.st.Delete(id); err != nil {
		return Info{}, n.undoResume(ctx, e, err)
	}
	n.dropImage(id) // no record names the image any more
	return n.setRunning(e), nil
}

// dropImage removes the image sandbox id, running again, was restored from, once no
// record names it, when the runtime leaves it (imageDropper); a removal that fails is a
// WARN.
func (n *Node) dropImage(id string) {
	if d, ok := n.rt.(imageDropper); ok {
		if err := d.DropImage(id); err != nil {
			n.logger.Warn("resumed sandbox's image not removed: it stays on disk until the sandbox is paused again or deleted",
				"id", id, "error", err)
		}
	}
}

// An imageDropper is a Runtime whose Resume leaves the image (the fake's, runsc's), to be
// removed once the resumed sandbox's record is: removed by Resume, a process killed before
// the record went came back with the sandbox paused and no image to resume it from.
type imageDropper interface {
	DropImage(id string) error
}

// died removes sandbox e, which its runtime's Pause (op "pause") or Resume ("resume")
// found dead (err, ErrDied), and returns op's error. Its runtime's remains go first (runsc's stopped container, its
// bundle: Destroy), then the sandbox from the node, then a record of it, as in Delete: a
// running sandbox has none, but one whose resume could not remove it (undoResume) has, and
// the next server would list it paused with no image. The WARN line is the one that says
// the sandbox died: a drain's Preserver reports it Vanished (ErrDied wraps pause.ErrGone),
// which is no fault, and lists it no more.
func (n *Node) died(ctx context.Context, e *entry, op string, err error) error {
	id := e.ID
	if derr := n.rt.Destroy(ctx, id); derr != nil {
		n.settleAs(e, Died)
		n.logger.Error(diedWords(op)+", and removing what it left failed: listed as died until a delete removes it",
			"id", id, "error", err, "destroy_error", derr)
		return fmt.Errorf("%s %s: %w; and removing what it left failed (still listed %s, for a delete): %w", op, id, err, Died, derr)
	}
	n.logger.Warn(diedWords(op)+": what it left is removed, and it is listed no more",
		"id", id, "error", err)
	if rerr := n.drop(id, "dead"); rerr != nil {
		return fmt.Errorf("%s %s: %w; removed, but its record stays: %w", op, id, err, rerr)
	}
	return fmt.Errorf("%s %s: %w", op, id, err)
}

// diedWords is how died's lines say that a sandbox died, by op: a resume finds an image
// that restores nothing that runs (row 1394), a sandbox checkpointed long before, where
// its line said "died before its checkpoint" (docs/faults.md row 1494).
func diedWords(op string) string {
	if op == "resume" {
		return "sandbox found dead at its resume, its image restoring nothing that runs (its checkpoint caught its workload exiting)"
	}
	return "sandbox died before its checkpoint"
}

// lost lists sandbox e Lost: its runtime's Pause stopped it and lost its state (err,
// ErrLost). What it left is removed, within ctx, with any record of it (a resume being
// undone leaves one, naming an image the pause removed), and an ERROR line says so;
// removals that fail are added to the error and to that line, and a Delete retries them.
func (n *Node) lost(ctx context.Context, e *entry, err error) error {
	derr := n.rt.Destroy(ctx, e.ID)
	if derr == nil {
		derr = n.st.Delete(e.ID)
	}
	n.settleAs(e, Lost)
	if derr != nil {
		n.logger.Error("sandbox lost by a pause that failed, and removing what it left failed: listed lost until a delete removes it",
			"id", e.ID, "error", err, "remove_error", derr)
		return fmt.Errorf("%w; and removing what it left failed (listed %s, for a delete): %w", err, Lost, derr)
	}
	n.logger.Error("sandbox lost by a pause that failed: its state is gone; listed lost until a delete",
		"id", e.ID, "error", err)
	return err
}

// undoResume pauses again sandbox e, resumed but whose record could not be removed
// (derr), and writes its record anew (Resume says why), and returns Resume's error.
// A pause that finds the sandbox dead (ErrDied) removes it as Pause does (died); one that
// stops it in an image that is not durable (ErrNotDurable) leaves it listed paused, as
// Pause does: neither is listed running, which the runtime did not leave it.
func (n *Node) undoResume(ctx context.Context, e *entry, derr error) error {
	id := e.ID
	ctx = context.WithoutCancel(ctx) // as the resume it undoes: the client may be gone
	image, perr := n.rt.Pause(ctx, id)
	if errors.Is(perr, ErrUnverified) { // paused again, saved: recorded as any save
		n.logger.Error("resumed sandbox paused again in an image that cannot be read: whether it saved a workload that runs is not known",
			"id", id, "error", perr)
		perr = nil
	}
	switch {
	case errors.Is(perr, ErrDied): // it died since its resume: only its remains to remove
		return fmt.Errorf("resume %s: its record could not be removed: %w; and pausing it again found it dead: %w", id, derr, n.died(ctx, e, "pause", perr))
	case errors.Is(perr, ErrLost): // stopped, its state gone with the failed pause
		return fmt.Errorf("resume %s: its record could not be removed: %w; and pausing it again lost it: %w", id, derr, n.lost(ctx, e, perr))
	case errors.Is(perr, ErrNotDurable): // stopped in that image, its old record still there
		n.setUnrecorded(e, n.rt.Image(id), fmt.Errorf("resume %s undone: %w", id, perr))
		n.logger.Error("resumed sandbox stopped again in an image that is not durable, its stale record still there: listed paused; lost at exit unless resumed",
			"id", id, "record_error", derr, "pause_error", perr)
		return fmt.Errorf("resume %s: its record could not be removed: %w; and pausing it again left it stopped in an image that is not durable (listed paused): %w", id, derr, perr)
	}
	if perr != nil { // the runtime left it running, its old record still there
		n.setRunning(e)
		n.logger.Error("resumed sandbox keeps a stale record: the next server would bring it back paused from its image of before the resume",
			"id", id, "record_error", derr, "pause_error", perr)
		return fmt.Errorf("resume %s: its record could not be removed: %w; and pausing it again failed: %w: it runs, with a stale record that a restart would bring back", id, derr, perr)
	}
	werr := n.record(e, image)
	if werr != nil {
		werr = fmt.Errorf("resume %s undone: %w: %w", id, ErrUnrecorded, werr)
	}
	n.setUnrecorded(e, n.rt.Image(id), werr)
	if werr != nil {
		n.logger.Error("sandbox paused again after its resume, but its record was not rewritten: a restart may not bring it back",
			"id", id, "record_error", derr, "rewrite_error", werr)
		return fmt.Errorf("resume %s: its record could not be removed: %w; paused again, but rewriting its record failed: %w", id, derr, werr)
	}
	n.logger.Warn("resume undone: the sandbox's record could not be removed; paused again and recorded as it is now",
		"id", id, "error", derr)
	return fmt.Errorf("resume %s: its record could not be removed, so it was paused again (a stale record would bring it back from its image of before the resume): %w", id, derr)
}

// record writes the record of sandbox e, paused into image.
func (n *Node) record(e *entry, image string) error {
	return n.st.Put(store.Record{ID: e.ID, State: Paused, Runtime: n.rt.Name(), Image: image,
		TimeoutS: e.TimeoutS, PausedAt: time.Now()})
}

// Delete destroys a running, paused, dead (Died) or lost sandbox and its record.
//
// A Destroy that fails leaves the sandbox listed as it was, its record too: it may run on
// (runsc delete -force cut short) or keep its image, and forgotten, every retry would be
// told "not found" and the server's Close, which force-deletes what the node lists, would
// not reach it. One whose container is deleted but whose files stay (ErrLeftover: a
// read-only volume) is gone all the same, dropped with a WARN, its files left for the next
// server's sweep. A record that cannot be removed once the sandbox is destroyed stays for
// the next server, which lists it paused with no image to resume: an ERROR line and the
// error say so.
func (n *Node) Delete(ctx context.Context, id string) error {
	n.mu.Lock()
	e, ok := n.sbs[id]
	switch {
	case !ok:
		n.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	case e.State != Paused && !timed(e.State):
		n.mu.Unlock()
		return fmt.Errorf("%w: %s is %s", ErrConflict, id, e.State)
	}
	prev := e.State
	e.State = Deleting
	if e.timer != nil {
		e.timer.Stop()
	}
	n.mu.Unlock()
	if err := n.rt.Destroy(ctx, id); errors.Is(err, ErrLeftover) {
		// Gone, whatever stays on disk: listed on, it was deleted again at every timeout,
		// and failed again on what a read-only volume keeps (row 3101).
		n.logger.Warn("sandbox deleted; what it left on disk stays, for the next server's sweep", "id", id, "error", err)
	} else if err != nil {
		n.settleAs(e, prev) // running, dead or lost, its timeout, armed again, retries the delete
		return fmt.Errorf("delete %s: %w (still listed %s, for a retry)", id, err, prev)
	}
	if err := n.drop(id, "deleted"); err != nil {
		return fmt.Errorf("delete %s: destroyed, but its record stays: %w", id, err)
	}
	return nil
}

// drop forgets sandbox id, whose runtime remains are gone (Destroy), and removes its
// record, as Delete and died do. A record that stays is said at ERROR, the sandbox named
// as what (deleted, dead), and returned: the next server would list the sandbox paused,
// with no image to resume.
func (n *Node) drop(id, what string) error {
	n.forget(id)
	if err := n.st.Delete(id); err != nil {
		n.logger.Error(what+" sandbox keeps its record: the next server will list it paused, with no image to resume",
			"id", id, "error", err)
		return err
	}
	return nil
}

// List returns every sandbox, sorted by ID.
func (n *Node) List() []Info {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Info, 0, len(n.sbs))
	for _, e := range n.sbs {
		out = append(out, e.Info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Count returns how many sandboxes are in state.
func (n *Node) Count(state string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, e := range n.sbs {
		if e.State == state {
			c++
		}
	}
	return c
}

// Running returns the sandboxes running now, and those a request in flight is creating,
// pausing or resuming (which may yet end running, after the last listing of a shutdown),
// as pause.Sandboxes whose Preserve is Pause: pause.ListFunc(node.Running) is the node's
// pause.Lister.
//
// It also returns the sandboxes listed paused with no record (a pause whose record could
// not be written, before the drain: ErrUnrecorded, ErrNotDurable), which the process's
// end would lose: Preserve records them when it can, and the Report counts them lost
// when it cannot.
func (n *Node) Running(context.Context) ([]pause.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []pause.Sandbox
	for _, e := range n.sbs {
		if e.State == Running || InTransition(e.State) || e.State == Paused && e.unrecorded != nil {
			out = append(out, preservable{n: n, id: e.ID})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out, nil
}

// preservable is a running sandbox as the pause package sees it.
type preservable struct {
	n  *Node
	id string
}

func (p preservable) ID() string { return p.id }

// Size reports the fake runtime's size of the sandbox (Fake.Size); other runtimes have
// none (0, unknown). It is not an estimate of its own (pause.Estimated): the Preserver
// turns sizes into times with the estimate of a pause it was given (the one learned by the
// last shutdown) and the rate it measures, which count everything a pause does; a fake's
// latency leaves out the image and the record it writes, so its first round never kept to
// it and a learned level was never taken.
func (p preservable) Size() int64 {
	if f, ok := p.n.rt.(*Fake); ok {
		return f.Size(p.id)
	}
	return 0
}

// Preserve pauses the sandbox; one no longer running is pause.ErrGone. A sandbox in
// transition is waited for, within ctx: a client's pause or resume that fails leaves it
// running, and then only this pause saves it. A pause that left it paused with no record
// (ErrUnrecorded) fails for good: its retry would only write the record again, which has
// just failed. So does
// one lost by a pause that failed (Lost), this one's or a client's: it is no longer
// running, but not gone.
func (p preservable) Preserve(ctx context.Context) error {
	for {
		_, err := p.n.Pause(ctx, p.id)
		if errors.Is(err, ErrUnrecorded) || errors.Is(err, ErrLost) || errors.Is(err, ErrUnverified) {
			return backoff.Permanent(err)
		}
		if !errors.Is(err, ErrConflict) {
			if errors.Is(err, ErrNotFound) {
				return fmt.Errorf("%w: %w", pause.ErrGone, err)
			}
			return err
		}
		state, werr := p.n.AwaitSettled(ctx, p.id)
		switch {
		case errors.Is(werr, ErrNotFound):
			return fmt.Errorf("%w: %w", pause.ErrGone, werr)
		case werr != nil:
			return werr
		case state == Lost:
			return backoff.Permanent(fmt.Errorf("%w: %s is listed %s: a pause of it failed and stopped it", ErrLost, p.id, state))
		case state != Running:
			return fmt.Errorf("%w: %w", pause.ErrGone, err)
		}
	}
}

// recordUnrecorded writes the record of sandbox id when it is listed paused with none
// (entry.unrecorded): a pause of it, a client's retry or a drain's (Running lists it).
// It reports whether it was such a sandbox; the error says why it
// stays unrecorded, permanent: its image is not durable (ErrNotDurable), which no record
// may point at, or the record cannot be written, as when the pause failed to.
func (n *Node) recordUnrecorded(id string) (Info, bool, error) {
	n.mu.Lock()
	e, ok := n.sbs[id]
	if !ok || e.State != Paused || e.unrecorded == nil {
		n.mu.Unlock()
		return Info{}, false, nil
	}
	why := e.unrecorded
	e.State = Pausing // no resume nor delete meanwhile: a resume removes the record
	n.mu.Unlock()
	if errors.Is(why, ErrNotDurable) {
		n.setUnrecorded(e, e.image, why)
		return Info{}, true, backoff.Permanent(fmt.Errorf("%s is paused in an image that is not durable, with no record: %w", id, why))
	}
	if err := n.record(e, e.image); err != nil {
		n.setUnrecorded(e, e.image, why)
		return Info{}, true, backoff.Permanent(fmt.Errorf("%s is paused with no record (%w), and writing it failed again: %w", id, why, err))
	}
	info := n.setUnrecorded(e, e.image, nil)
	n.logger.Info("sandbox paused without a record is recorded now", "id", id, "was", why)
	return info, true, nil
}

// transition moves sandbox id from state from to state to, stopping its timer.
func (n *Node) transition(id, from, to string) (*entry, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.sbs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if e.State != from {
		return nil, fmt.Errorf("%w: %s is %s, not %s", ErrConflict, id, e.State, from)
	}
	e.State = to
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	return e, nil
}

// setRunning marks e running and arms its timeout.
func (n *Node) setRunning(e *entry) Info { return n.settleAs(e, Running) }

// setPaused marks e paused into image, out of its transition; a paused sandbox has no
// timeout.
// A sandbox that was paused with no record (entry.unrecorded) stays so: a resume that
// failed leaves it as it was.
func (n *Node) setPaused(e *entry, image string) Info {
	n.mu.Lock()
	defer n.mu.Unlock()
	e.State, e.image = Paused, image
	n.settle()
	return e.Info
}

// setUnrecorded is setPaused of a sandbox whose record is written (why nil) or is not,
// why.
func (n *Node) setUnrecorded(e *entry, image string, why error) Info {
	n.mu.Lock()
	defer n.mu.Unlock()
	e.State, e.image, e.unrecorded = Paused, image, why
	n.settle()
	return e.Info
}

// settleAs puts e in state, out of its transition, and arms its timeout when the state
// has one: running, or dead (Died) or lost, whose timeout removes it.
func (n *Node) settleAs(e *entry, state string) Info {
	n.mu.Lock()
	defer n.mu.Unlock()
	e.State = state
	if state != Paused { // Delete's failure puts a paused one back as it was
		e.unrecorded = nil
	}
	n.settle()
	if timed(state) && !n.closed {
		id := e.ID
		e.timer = time.AfterFunc(time.Duration(e.TimeoutS)*time.Second, func() { n.timeout(id) })
	}
	return e.Info
}

// timed reports whether a sandbox in state has a timeout, which deletes it: running,
// dead (Died) or lost.
func timed(state string) bool { return state == Running || state == Died || state == Lost }

// timeout deletes a sandbox whose timeout passed while it was running, dead or lost.
func (n *Node) timeout(id string) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.wg.Add(1)
	if n.timingOut == nil {
		n.timingOut = map[string]bool{}
	}
	n.timingOut[id] = true
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.timingOut, id)
		n.mu.Unlock()
		n.wg.Done()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Delete(ctx, id); err != nil && !errors.Is(err, ErrConflict) {
		n.logger.Warn("sandbox timeout: delete failed", "id", id, "error", err)
	}
}

func (n *Node) forget(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.sbs, id)
	n.settle()
}

// settle wakes whoever waits for a sandbox to leave its transition. n.mu is held.
func (n *Node) settle() {
	close(n.settled)
	n.settled = make(chan struct{})
}

// InTransition reports whether a sandbox in state may yet end running: being created,
// paused or resumed by a request in flight.
func InTransition(state string) bool {
	return state == Creating || state == Pausing || state == Resuming
}

// AwaitSettled waits until sandbox id is no longer in transition (InTransition: a request
// in flight creates, pauses or resumes it) and returns its state; it returns an error
// wrapping ErrNotFound once the sandbox is gone, or, when ctx ends first, one saying the
// state it was still in, wrapping ctx's cause. What acts on the sandboxes at a deadline (a
// drain's escalation) waits here for the end of a transition rather than pass it over.
func (n *Node) AwaitSettled(ctx context.Context, id string) (string, error) {
	for {
		n.mu.Lock()
		e, ok := n.sbs[id]
		var state string
		if ok {
			state = e.State
		}
		settled := n.settled
		n.mu.Unlock()
		switch {
		case !ok:
			return "", fmt.Errorf("%w: %s", ErrNotFound, id)
		case !InTransition(state):
			return state, nil
		}
		select {
		case <-settled:
		case <-ctx.Done():
			return state, fmt.Errorf("%s still %s: %w", id, state, context.Cause(ctx))
		}
	}
}

// SeedIDs makes the IDs of the sandboxes Create makes from now on a sequence drawn from
// seed, the same for the same seed on every Node, where they are random otherwise: two
// servers seeded alike have the same sandboxes, and a fake sandbox's pause latency and size
// follow from its ID (Fake.Latency), so a comparison of two drains (drainsim's seed and
// drainkit) pauses the same set with the same latencies. An ID the Node already has (a
// paused sandbox's record from an earlier server with the seed) is passed over for the
// next one. Call it before the first Create.
func (n *Node) SeedIDs(seed uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ids = mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// newID returns an ID no sandbox of the node has: random, or SeedIDs's next. The caller
// holds n.mu.
func (n *Node) newID() string {
	for {
		var b [6]byte
		if n.ids == nil {
			_, _ = rand.Read(b[:])
		} else {
			v := n.ids.Uint64()
			for i := range b {
				b[i] = byte(v >> (8 * i))
			}
		}
		id := "sb-" + hex.EncodeToString(b[:])
		if _, taken := n.sbs[id]; !taken {
			return id
		}
	}
}
