//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc/runsctest"
)

// fsImmutableFl is FS_IMMUTABLE_FL (linux/fs.h), which x/sys/unix does not name.
const fsImmutableFl = 0x10

// setImmutable sets or clears dir's immutable attribute (chattr +i).
func setImmutable(dir string, on bool) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if on {
		flags = fsImmutableFl
	}
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags)
}

// Fault (a review of row 2222, which took EROFS alone for a volume no checkpoint can
// begin on): an images directory made immutable (chattr +i: a person's guard, a
// provisioning tool's) refuses every image directory with EPERM, and stays so through a
// drain as a read-only volume does; so does one the worker may not write (EACCES: its
// owner, its mode, an LSM's denial, for a worker that is not root). The Preserver took
// the failure for a passing one and tried it again to near the preserve deadline, the
// sandbox running all along, signalled only then, where it is signalled at once.
//
//	0          the drain begins; the images directory is immutable
//	+0.0x s    the checkpoint's mkdir: EPERM, the sandbox runs
//	           (before: tried again until the preserve deadline, +4.5 s)
//	soon after SIGTERM, while most of the grace is left
func TestSandboxesOnAnImmutableImagesDirectoryAreSignalledAtOnce(t *testing.T) {
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace // preserve deadline +4.5 s
	cfg.Concurrency = 1
	w, _, stop, d, ids := slowWorker(t, cfg, 1)
	id := ids[0]
	images := filepath.Dir(w.rt.(*sandbox.Runsc).Image(id))
	runsctest.ImagesVolume(t, images, 0, "size=1m", "an images volume")
	if err := setImmutable(images, true); err != nil {
		realpart.Missing(t, "skipping: tmpfs's chattr +i needs Linux 6.0 and CAP_LINUX_IMMUTABLE: "+err.Error())
	}
	t.Cleanup(func() { _ = setImmutable(images, false) })

	rep := stop() // as SIGTERM would
	lines := d.calls(rep.Start)
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	e := rep.Preserve.Entries[0]
	pre := rep.Phase(drain.PhasePreserve)
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	t.Logf("entry %s after %d attempts, ended +%v: %s", e.Outcome, e.Attempts, e.End.Sub(rep.Start).Round(time.Millisecond), e.Error)
	t.Logf("preserve phase ended +%v (deadline +%v)", pre.End.Sub(rep.Start).Round(time.Millisecond), pre.Deadline.Sub(rep.Start).Round(time.Millisecond))
	assert.Contains(t, e.Error, "operation not permitted", "the Report names why")
	assert.Equal(t, 1, e.Attempts, "a checkpoint that cannot begin in an immutable directory was tried again")
	require.Contains(t, lines, "kill "+id+" 15", "no SIGTERM")
	assert.True(t, pre.End.Before(pre.Deadline), "the preserve phase held the sandbox to its deadline")
	assert.Equal(t, drain.OK, esc.Result, "the sandbox did not end on its SIGTERM in the time left: %s", esc.Error)
}
