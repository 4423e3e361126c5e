package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drainkit/drainkit/internal/durable"
	"github.com/drainkit/drainkit/internal/runsc"
)

// A checkpointAdopter is a Runtime whose checkpoints can outlive the server that began
// them: runsc's client, in a process group of its own, goes on writing after its server
// exits.
type checkpointAdopter interface {
	// adoptCheckpoint waits, within ctx, for a checkpoint of sandbox id that another
	// process runs, and reports whether one ran; when it made an image, it returns it,
	// durable, with the sandbox's timeout.
	adoptCheckpoint(ctx context.Context, id string, logger *slog.Logger) (image string, timeoutS int, found bool, err error)
	// markCheckpointLeft marks sandbox id as one whose checkpoint this process leaves
	// running at its exit, for the next server to judge what it saved even once it has
	// ended; adopted removes the mark once that is recorded.
	markCheckpointLeft(id string) error
	adopted(id string) error
}

// MarkCheckpointsLeft marks the sandboxes ids, whose checkpoints this server leaves
// running as it exits (gvisor-worker's wait for those its drain abandoned gave up), for
// the next server's AdoptCheckpoints: one that ended before that server started had left
// the sandbox stopped, its image whole and no record, and, its client no longer running,
// SweepOrphans took it for one lost running and deleted it, image and all. The mark
// counts only for a server in this PID namespace (markedHere): a new pod's finds the
// sandbox's save cut by the end of the last pod's. A mark that cannot be written is said
// at ERROR: that sandbox is then adopted only while its checkpoint still runs. Call it
// holding the state directory's lock.
func (n *Node) MarkCheckpointsLeft(ids []string) {
	rt, ok := n.rt.(checkpointAdopter)
	if !ok {
		return
	}
	for _, id := range ids {
		if err := rt.markCheckpointLeft(id); err != nil {
			n.logger.Error("the checkpoint left running at exit not marked: the next server records what it saves only if it still runs as that server starts",
				"id", id, "error", err)
		}
	}
}

// A timeoutKeeper is a Runtime that keeps each sandbox's timeout beside it on disk, for
// a server after this one to record it (adoptCheckpoint): the record is written only once
// a pause is done, and a server that exits before that takes the timeout with it.
type timeoutKeeper interface {
	keepTimeout(id string, timeoutS int) error
}

// MsgAwaitingCheckpoint is the WARN line of a server that waits for a checkpoint of a
// sandbox without a record that another process runs (AdoptCheckpoints).
const MsgAwaitingCheckpoint = "a checkpoint of a sandbox without a record still runs, begun by a server before this one: waiting for it to end, to record what it saves"

// AdoptCheckpoints records the sandboxes that a checkpoint another process still runs
// saves: a server before this one whose wait for a checkpoint its drain had abandoned gave
// up at its exit (gvisor-worker's, 250 ms before SIGKILL) left runsc checkpoint running,
// in a process group of its own, still writing the image of a sandbox that has no record
// until its checkpoint ends; SweepOrphans took it for one lost running and force-deleted
// it mid-save, the sandbox lost. Among the sandboxes SweepOrphans would take (not listed,
// no record file in recordsDir), it waits for each such checkpoint (a WARN,
// MsgAwaitingCheckpoint), and takes one that has ended already for such a checkpoint
// when the server that left it marked its sandbox (MarkCheckpointsLeft); it then judges
// what each left as runsc's Checkpoint judges one whose
// client was killed: one made is recorded and listed paused, with the timeout the sandbox
// was created with; one not made is said at ERROR and left to SweepOrphans. Its error is
// ctx's, when ctx ended a wait (the server's own SIGTERM): the sandbox is then left as it
// is, neither recorded nor swept, and the server must not sweep.
//
// The waits end within (0: no bound) of the call: runsc checkpoint has no bound of its
// own (a stuck gofer, a hung images volume), and one that hangs held the server from
// serving for ever, every sandbox of the node refused. A sandbox whose checkpoint still
// runs then is left as it is, neither recorded nor swept (SweepOrphans passes it over),
// and marked (MarkCheckpointsLeft) for the next server to judge what it saved; a WARN
// says so. Call it once NewNode has loaded the records, before SweepOrphans, holding the
// state directory's lock. logger nil: the node's.
func (n *Node) AdoptCheckpoints(ctx context.Context, recordsDir string, within time.Duration, logger *slog.Logger) error {
	if logger == nil {
		logger = n.logger
	}
	rt, ok := n.rt.(checkpointAdopter)
	if !ok {
		return nil
	}
	orphans, err := n.orphans(recordsDir)
	if err != nil {
		return nil // SweepOrphans says so, and removes nothing
	}
	wctx := ctx
	if within > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, within, errStillCheckpointing)
		defer cancel()
	}
	for _, id := range slices.Sorted(maps.Keys(orphans)) {
		image, timeoutS, found, err := rt.adoptCheckpoint(wctx, id, logger)
		switch {
		case !found:
			continue
		case ctx.Err() != nil:
			return fmt.Errorf("waiting for the checkpoint of %s a server before this one left running: %w", id, err)
		case wctx.Err() != nil:
			n.leaveCheckpointing(id, within, err, logger)
			continue
		case err != nil:
			logger.Error("the checkpoint a server before this one left running did not save its sandbox: lost; what it left is swept",
				"id", id, "error", err)
			continue
		}
		n.adopt(id, image, timeoutS, logger)
	}
	return nil
}

// errStillCheckpointing ends AdoptCheckpoints's waits at their bound.
var errStillCheckpointing = errors.New("the checkpoint still runs at the end of the wait for it")

// leaveCheckpointing has SweepOrphans pass over sandbox id, whose checkpoint AdoptCheckpoints
// stopped waiting for after within (err), and marks it for the next server to judge.
func (n *Node) leaveCheckpointing(id string, within time.Duration, err error, logger *slog.Logger) {
	logger.Warn("a checkpoint a server before this one left running still runs: the sandbox is left as it is, neither recorded nor swept, for the next server to record what it saves",
		"id", id, "waited", within, "error", err)
	n.mu.Lock()
	if n.checkpointing == nil {
		n.checkpointing = map[string]bool{}
	}
	n.checkpointing[id] = true
	n.mu.Unlock()
	n.MarkCheckpointsLeft([]string{id})
}

// adopt lists sandbox id paused in image, with timeoutS, and writes its record; one whose
// record cannot be written is listed paused with none, which a drain records when it can
// (Running lists it).
func (n *Node) adopt(id, image string, timeoutS int, logger *slog.Logger) {
	e := &entry{Info: Info{ID: id, State: Paused, TimeoutS: timeoutS}, image: image}
	if err := n.record(e, image); err != nil {
		e.unrecorded = fmt.Errorf("%w: %w", ErrUnrecorded, err)
		logger.Error("the sandbox a checkpoint left running by a server before this one saved is paused, but its record was not written: lost at exit unless a drain records it",
			"id", id, "error", err)
	} else {
		logger.Info("recorded the sandbox a checkpoint left running by a server before this one saved: listed paused", "id", id, "timeout_s", timeoutS)
	}
	if e.unrecorded == nil {
		if err := n.rt.(checkpointAdopter).adopted(id); err != nil {
			logger.Warn("the mark of a checkpoint left running by a server before this one not removed", "id", id, "error", err)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sbs[id] = e
}

// timeoutFile is the file in a runsc sandbox's bundle that holds its timeout, in seconds.
const timeoutFile = "timeout_s"

// keepTimeout writes sandbox id's timeout into its bundle, durably.
func (r *Runsc) keepTimeout(id string, timeoutS int) error {
	return durable.WriteFile(filepath.Join(r.Bundle(id).Dir, timeoutFile), []byte(strconv.Itoa(timeoutS)), 0o600)
}

// keptTimeout returns the timeout keepTimeout kept for sandbox id; a day, the Run RPC's
// default, with the error, when none can be read (a bundle of a server before
// keepTimeout).
func (r *Runsc) keptTimeout(id string) (int, error) {
	data, err := os.ReadFile(filepath.Join(r.Bundle(id).Dir, timeoutFile))
	if err != nil {
		return 86400, err
	}
	s, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || s <= 0 || s > MaxTimeoutS {
		return 86400, fmt.Errorf("%s: %q is no timeout in [1, %d]", timeoutFile, data, MaxTimeoutS)
	}
	return s, nil
}

// checkpointLeftFile is the file in a runsc sandbox's bundle that marks its checkpoint
// as left running by a server at its exit (markCheckpointLeft).
const checkpointLeftFile = "checkpoint_left"

// markCheckpointLeft writes sandbox id's checkpointLeftFile. Not fsynced: it is written
// in the last 250 ms before SIGKILL (gvisor-worker's abandonedExitLead), which fsyncs
// behind a checkpoint's writeback would spend, and it need only outlive the process: a
// host that goes down takes the sandbox, and its save, with it.
func (r *Runsc) markCheckpointLeft(id string) error {
	return os.WriteFile(r.checkpointLeft(id), nil, 0o600)
}

// adopted removes sandbox id's checkpointLeftFile: its image is recorded, and a mark
// left would have a later sweep judge that image again once the sandbox, resumed from
// it, had run on.
func (r *Runsc) adopted(id string) error { return removePresent(r.checkpointLeft(id)) }

// markedHere reports whether sandbox id is marked as left checkpointing
// (markCheckpointLeft) and its container is known to this PID namespace's runsc: the
// checkpoint ran here, where its sandbox goes on saving whatever becomes of its server.
// One of another namespace (a pod's, which SIGKILL ended) was cut with its sandbox, and
// a save cut between two of its writes ends on a whole chunk: judged, it was recorded.
func (r *Runsc) markedHere(ctx context.Context, id string) bool {
	if _, err := os.Stat(r.checkpointLeft(id)); err != nil {
		return false
	}
	_, err := r.Runtime.State(ctx, id)
	return !errors.Is(err, runsc.ErrNotExist)
}

func (r *Runsc) checkpointLeft(id string) string {
	return filepath.Join(r.Bundle(id).Dir, checkpointLeftFile)
}

// adoptCheckpoint waits for the runsc checkpoint clients of sandbox id that run now
// (another process's: runsc.Runtime.CheckpointClients), then judges what they left
// (runsc.Runtime.CheckpointLeft) as Pause would: an image that holds the exiting tasks
// alone saved a workload that exited (removed, with ErrDied); a made one is made durable
// and returned with the sandbox's kept timeout. A sandbox marked by the server that left
// its checkpoint running (markCheckpointLeft) is judged so when none runs any more too:
// that checkpoint ended before this server started.
func (r *Runsc) adoptCheckpoint(ctx context.Context, id string, logger *slog.Logger) (string, int, bool, error) {
	pids := r.Runtime.CheckpointClients(id)
	if len(pids) == 0 && !r.markedHere(ctx, id) {
		return "", 0, false, nil
	}
	if len(pids) > 0 {
		logger.Warn(MsgAwaitingCheckpoint, "id", id, "pids", pids)
	} else {
		logger.Info("a checkpoint a server before this one left running has ended: recording what it saved", "id", id)
	}
	if _, err := r.Runtime.AwaitCheckpointClients(ctx, id); err != nil {
		return "", 0, true, err
	}
	image := r.Image(id)
	if err := r.Runtime.CheckpointLeft(ctx, id, image); err != nil {
		return "", 0, true, err
	}
	if running, unread := runsc.SavedRunning(image); unread == nil && !running {
		return "", 0, true, r.exitedAtCheckpoint(ctx, id, image)
	}
	if err := r.syncNew(image); err != nil {
		return "", 0, true, fmt.Errorf("its image is not durable: %w", err)
	}
	timeoutS, err := r.keptTimeout(id)
	if err != nil {
		logger.Warn("the sandbox's timeout was not kept: recorded with a day's", "id", id, "error", err)
	}
	return image, timeoutS, true, nil
}
