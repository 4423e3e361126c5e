package sandbox

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
)

// Fault: runsc puts a sandbox whose spec has no cgroupsPath (WriteBundle's) in a cgroup
// named by its container ID at the root of every hierarchy it uses (/sys/fs/cgroup/*/ID:
// 9 here, cgroup v1), and removes it only at `runsc delete`. A drain checkpoints its
// sandboxes and exits without deleting them (a delete takes 2 s), and the next worker,
// in a new pod's PID namespace, forgot its predecessor's runsc state unread
// (forgetOtherNamespaces): their cgroups stayed. The restore of such a sandbox, same ID,
// found its cgroup there, took it as someone else's (runsc owns only what it made), and
// its own delete left it: every sandbox a drain checkpointed left its cgroups for good
// (on a node whose pods see the host's hierarchy, as a privileged worker on cgroup v1
// does; 107 sb-* in each hierarchy of this machine after a day of tests). The state of
// another namespace now goes with the empty cgroups runsc made for its containers.
func TestCgroupsOfAnotherPIDNamespacesSandboxesGoWithItsState(t *testing.T) {
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// The predecessor: a worker in another pod, on the same state directory.
	before := NewRunsc(filepath.Join(dir, "runsc"))
	before.Runtime.Root = filepath.Join(dir, "runsc", "root", "pidns-1")
	id := "sb-" + rand.Text()[:12]
	require.NoError(t, before.Create(ctx, id))
	t.Cleanup(func() { removeCgroups(id) }) // a failing run leaves none behind
	if len(cgroups(id)) == 0 {
		t.Skip("runsc put the sandbox in no cgroup of its ID here: nothing to leave")
	}
	waitCount(t, before.Bundle(id), 1)
	image, err := before.Pause(ctx, id) // its drain: stopped, not deleted
	require.NoError(t, err)
	left := cgroups(id)
	t.Logf("left by the checkpointed sandbox: %v", left)
	require.NotEmpty(t, left)

	// The next worker, in its own PID namespace.
	rt, err := NewRuntime("runsc", dir, 0, 0)
	require.NoError(t, err)
	after := rt.(*Runsc)
	t.Cleanup(func() { _ = after.Runtime.DeleteAll(context.Background()) })
	assert.NoDirExists(t, before.Runtime.Root, "the other namespace's state is forgotten")
	assert.Empty(t, cgroups(id), "its sandbox's cgroups went with it")

	require.NoError(t, after.Resume(ctx, id, image))
	waitCount(t, after.Bundle(id), 2)
	require.NoError(t, after.Destroy(ctx, id))
	assert.Empty(t, cgroups(id), "the restored sandbox's delete removed the cgroups it made")
}

// cgroups returns the cgroup directories named id at the root of this host's hierarchies:
// where runsc puts a container whose spec has no cgroupsPath.
func cgroups(id string) []string {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", id))
	if fi, err := os.Stat(filepath.Join("/sys/fs/cgroup", id)); err == nil && fi.IsDir() {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", id))
	}
	return dirs
}

// removeCgroups removes the empty cgroups named id.
func removeCgroups(id string) {
	for _, d := range cgroups(id) {
		_ = os.Remove(d)
	}
}

// waitCount waits until the counter in bundle b is above min.
func waitCount(t *testing.T, b runsc.Bundle, min int) {
	t.Helper()
	require.Eventually(t, func() bool { c, err := b.Counter(); return err == nil && c > min },
		30*time.Second, 20*time.Millisecond, "the counter in %s did not pass %d", b.Dir, min)
}
