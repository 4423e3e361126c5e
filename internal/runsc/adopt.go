package runsc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"time"
)

// CheckpointClients returns the PIDs of the runsc checkpoint clients of container id
// under this Runtime's Root that run now, whoever started them: a server before this
// one, whose wait for a checkpoint it had abandoned gave up at its exit, left its client
// running (in a process group of its own, it outlives the server), still writing the
// image. A client is a live process whose arguments hold --root=Root and checkpoint, and
// end with id; a wrapper that runs runsc with those arguments counts as one.
func (r *Runtime) CheckpointClients(id string) []int {
	root := []byte("--root=" + r.Root)
	return processesWhose(func(pid int, cmdline []byte) bool {
		if pid == os.Getpid() {
			return false
		}
		args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
		return len(args) > 2 && string(args[len(args)-1]) == id && slices.ContainsFunc(args, func(a []byte) bool { return bytes.Equal(a, root) }) &&
			slices.ContainsFunc(args, func(a []byte) bool { return string(a) == "checkpoint" }) && !zombie(pid)
	})
}

// AwaitCheckpointClients waits until no checkpoint client of container id runs
// (CheckpointClients), asking every zombiePoll, and reports whether one ran as it was
// called; it returns ctx's cause, wrapped, when ctx ends first.
func (r *Runtime) AwaitCheckpointClients(ctx context.Context, id string) (bool, error) {
	found := false
	for {
		pids := r.CheckpointClients(id)
		if len(pids) == 0 {
			return found, nil
		}
		found = true
		select {
		case <-ctx.Done():
			return true, fmt.Errorf("runsc checkpoint %s still running (pids %v): %w", id, pids, context.Cause(ctx))
		case <-time.After(zombiePoll):
		}
	}
}

// CheckpointLeft judges what a checkpoint of container id into imageDir left, once its
// client, another process's (CheckpointClients), has ended unseen by this one: its exit
// status and its message went to that process. It is judged as a checkpoint whose client
// was killed is: a save that wrote nothing, a container not seen stopped within StopWait
// (a checkpoint made stops it), an images volume left with no space, or an image cut
// short is not a checkpoint made, and the error says which; nil is one made, its image
// whole as far as can be told.
func (r *Runtime) CheckpointLeft(ctx context.Context, id, imageDir string) error {
	if !saveBegun(imageDir) {
		return fmt.Errorf("runsc checkpoint %s ended unseen, and no save wrote to %s: not checkpointed", id, imageDir)
	}
	if err := r.awaitStop(ctx, id, StopWait); err != nil {
		return fmt.Errorf("runsc checkpoint %s ended unseen, and %w: not checkpointed", id, err)
	}
	if noSpaceLeft(imageDir) {
		return fmt.Errorf("runsc checkpoint %s ended unseen, the container stopped, but the images volume has no space left: "+
			"taken for a save that failed for want of it (no space left on device)", id)
	}
	if cut := imageCut(imageDir); cut != nil {
		return fmt.Errorf("runsc checkpoint %s ended unseen, the container stopped, but its image is %w: a save that failed, not checkpointed", id, cut)
	}
	return nil
}
