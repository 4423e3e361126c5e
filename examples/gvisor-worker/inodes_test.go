//go:build linux

package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
)

// Fault (a review of the checkpoints a full images volume refuses): a volume out of
// inodes, its bytes free, fails the image directory's mkdir with ENOSPC ("no space left
// on device"). The drain is bounded as for a volume out of bytes (a second checkpoint is
// not started while the volume has no more free than when one failed for want of space,
// and the sandbox is signalled at once), but the Report said why in bytes alone: "the
// images volume has 67108864 bytes free, no more than when a checkpoint that failed for
// want of space began", which an operator reads as a volume with room. It now says the
// volume has no inode free, and the rule is kept while it has none, whatever its bytes.
//
//	0          the drain begins; the images volume has bytes but no inode free
//	+0.0x s    the checkpoint's mkdir: ENOSPC, the sandbox runs
//	+0.0x s    the next is not started, saying the volume has no inode free
//	soon after SIGTERM, while most of the grace is left
func TestSandboxesOnAVolumeOutOfInodesAreSignalledSayingWhy(t *testing.T) {
	rep, lines, id := drainOnImagesVolume(t, 0, "size=64m,nr_inodes=1", "an images volume") // the root's inode alone
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	e := rep.Preserve.Entries[0]
	pre := rep.Phase(drain.PhasePreserve)
	t.Logf("entry %s after %d attempts, ended +%v: %s", e.Outcome, e.Attempts, e.End.Sub(rep.Start).Round(time.Millisecond), e.Error)
	assert.LessOrEqual(t, e.Attempts, 2, "a checkpoint that cannot begin for want of inodes was tried until the deadline")
	assert.True(t, pre.End.Before(pre.Deadline), "the preserve phase held the sandbox to its deadline")
	require.Contains(t, lines, "kill "+id+" 15", "no SIGTERM")
	assert.Contains(t, e.Error, "the images volume has no inode free", "the Report says why in bytes free alone")
	assert.Contains(t, e.Error, "for want of inodes")
}
