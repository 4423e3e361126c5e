//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// roleEnv makes the test binary print its runsc state directory's name
// (runscStateName) and its PID namespace, and exit: a process of a new PID
// namespace, as a worker restarted in a new pod is.
const roleEnv = "SANDBOX_TEST_ROLE"

func TestMain(m *testing.M) {
	if dir, ok := strings.CutPrefix(os.Getenv(roleEnv), "resume-killed:"); ok {
		resumeUntilKilled(dir)
	}
	if os.Getenv(roleEnv) == "state-name" {
		if err := pid1test.MountProc(); err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		ns, _ := os.Readlink("/proc/self/ns/pid")
		fmt.Println(ns, filepath.Base(NewRunsc("/state").Runtime.Root))
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func newFakeNode(t *testing.T, dir string, latency time.Duration) (*Node, []store.Problem) {
	st, err := store.Open(filepath.Join(dir, "records"))
	require.NoError(t, err)
	n, problems, err := NewNode(&Fake{Dir: filepath.Join(dir, "images"), PauseLatency: latency}, st, nil)
	require.NoError(t, err)
	t.Cleanup(n.Close)
	return n, problems
}

// newRunscNode returns a Node of real gVisor sandboxes in a directory of its own, its
// runtime and its store (for a next Node), skipping the test (failing it under CI=true)
// without a usable runsc; every container left is deleted at the end. The caller closes
// the Node.
func newRunscNode(t *testing.T) (*Node, *Runsc, *store.Store) {
	t.Helper()
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	dir := t.TempDir()
	rt := NewRunsc(dir)
	t.Cleanup(func() { _ = rt.Runtime.DeleteAll(context.Background()) })
	st, err := store.Open(filepath.Join(dir, "records"))
	require.NoError(t, err)
	n, _, err := NewNode(rt, st, nil)
	require.NoError(t, err)
	return n, rt, st
}

func TestPausedSandboxesSurviveTheServerAndResume(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, _ := newFakeNode(t, dir, time.Millisecond)
	a, err := n.Create(ctx, 3600)
	require.NoError(t, err)
	assert.Equal(t, Running, a.State)
	b, err := n.Create(ctx, 3600)
	require.NoError(t, err)
	p, err := n.Pause(ctx, a.ID)
	require.NoError(t, err)
	assert.Equal(t, Paused, p.State)
	_, err = n.Pause(ctx, a.ID)
	require.ErrorIs(t, err, ErrConflict, "pausing a paused sandbox")
	n.Close()

	// The next server process: only the paused sandbox comes back, paused.
	n2, problems := newFakeNode(t, dir, time.Millisecond)
	assert.Empty(t, problems)
	assert.Equal(t, []Info{{ID: a.ID, State: Paused, TimeoutS: 3600}}, n2.List())
	_, err = n2.Resume(ctx, b.ID)
	require.ErrorIs(t, err, ErrNotFound)
	r, err := n2.Resume(ctx, a.ID)
	require.NoError(t, err)
	assert.Equal(t, Running, r.State)
	recs, _, err := n2.st.Load()
	require.NoError(t, err)
	assert.Empty(t, recs, "a resumed sandbox has no record")

	require.NoError(t, n2.Delete(ctx, a.ID))
	assert.Empty(t, n2.List())
	require.ErrorIs(t, n2.Delete(ctx, a.ID), ErrNotFound)
}

func TestDamagedRecordIsReportedNotLoaded(t *testing.T) {
	dir := t.TempDir()
	n, _ := newFakeNode(t, dir, time.Millisecond)
	a, err := n.Create(context.Background(), 60)
	require.NoError(t, err)
	_, err = n.Pause(context.Background(), a.ID)
	require.NoError(t, err)
	n.Close()
	path := filepath.Join(dir, "records", a.ID+".rec")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data[:len(data)/2], 0o600)) // torn by a crash

	n2, problems := newFakeNode(t, dir, time.Millisecond)
	assert.Empty(t, n2.List())
	require.Len(t, problems, 1)
	assert.Equal(t, path, problems[0].Path)
}

func TestRecordOfAnotherRuntimeIsNotLoaded(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "records"))
	require.NoError(t, err)
	require.NoError(t, st.Put(store.Record{ID: "sb-1", State: Paused, Runtime: "runsc"}))
	n, problems := newFakeNode(t, dir, time.Millisecond)
	assert.Empty(t, n.List())
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0].Err, `runtime "runsc"`)
}

func TestPauseThatRunsOutOfTimeLeavesSandboxRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newFakeNode(t, t.TempDir(), 2*time.Second)
		a, err := n.Create(t.Context(), 3600)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = n.Pause(ctx, a.ID)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1, n.Count(Running))
		recs, _, err := n.st.Load()
		require.NoError(t, err)
		assert.Empty(t, recs, "no record for a sandbox that was not paused")
	})
}

func TestRunningSandboxEndsAtItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newFakeNode(t, t.TempDir(), time.Second)
		a, err := n.Create(t.Context(), 60)
		require.NoError(t, err)
		_, err = n.Create(t.Context(), 120)
		require.NoError(t, err)
		time.Sleep(59 * time.Second)
		synctest.Wait()
		assert.Len(t, n.List(), 2)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		require.Len(t, n.List(), 1)
		assert.NotEqual(t, a.ID, n.List()[0].ID)
		n.Close()
	})
}

// A sandbox of the largest timeout allowed runs until that timeout, ten years on, and
// ends then: its timer never overflows time.Duration into one that fires at once.
func TestSandboxOfTheLargestTimeoutRunsUntilIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newFakeNode(t, t.TempDir(), time.Second)
		_, err := n.Create(t.Context(), MaxTimeoutS)
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, 1, n.Count(Running), "running once created")
		time.Sleep(MaxTimeoutS*time.Second - time.Second)
		synctest.Wait()
		assert.Equal(t, 1, n.Count(Running), "running a second before its timeout")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Empty(t, n.List(), "ended at its timeout")
		n.Close()
	})
}

func TestPreserverPausesRunningSandboxesInParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newFakeNode(t, t.TempDir(), time.Second)
		for range 8 {
			_, err := n.Create(t.Context(), 24*3600)
			require.NoError(t, err)
		}
		p, err := pause.New(pause.ListFunc(n.Running), pause.Config{Limit: 4})
		require.NoError(t, err)
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		assert.Equal(t, 8, rep.Counts[pause.Preserved])
		assert.Equal(t, 2*time.Second, time.Since(start), "8 one-second pauses, 4 at a time")
		assert.Equal(t, 8, n.Count(Paused))
		n.Close()
	})
}

// Fake pauses that share the node's capacity (SharePauses(4), a disk that writes four
// pauses at full speed) cost what a real snapshot's would: up to 4 at once run at full
// speed, 8 at once each at half speed, so 8 one-second pauses take 2 s however many run
// at once from 4 up, and 4 s 2 at a time. Before, a fake pause was a timer, and 8 at once
// ended in 1 s: parallel pauses were free.
func TestSharedPausesRunAtFullSpeedUpToTheirCapacityOnly(t *testing.T) {
	for _, tc := range []struct {
		limit int
		want  time.Duration
	}{{2, 4 * time.Second}, {4, 2 * time.Second}, {8, 2 * time.Second}} {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n, _ := newFakeNode(t, t.TempDir(), time.Second)
				n.rt.(*Fake).SharePauses(4)
				for range 8 {
					_, err := n.Create(t.Context(), 24*3600)
					require.NoError(t, err)
				}
				p, err := pause.New(pause.ListFunc(n.Running), pause.Config{Limit: tc.limit})
				require.NoError(t, err)
				start := time.Now()
				rep := p.Run(t.Context(), time.Now().Add(time.Minute))
				assert.Equal(t, 8, rep.Counts[pause.Preserved])
				assert.Equal(t, tc.want, time.Since(start).Round(time.Millisecond), "8 one-second pauses, %d at a time", tc.limit)
				n.Close()
			})
		})
	}
	f := &Fake{}
	f.SharePauses(0)
	assert.Nil(t, f.Disk, "0: pauses share nothing")
}

func TestFakeLatencyIsSpreadAndStablePerID(t *testing.T) {
	f := &Fake{PauseLatency: time.Second, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		l := f.Latency(id)
		assert.Equal(t, l, f.Latency(id))
		assert.GreaterOrEqual(t, l, 500*time.Millisecond)
		assert.LessOrEqual(t, l, 1500*time.Millisecond)
		seen[l] = true
	}
	assert.Greater(t, len(seen), 1)
	assert.Equal(t, time.Second, (&Fake{PauseLatency: time.Second}).Latency("a"))
}

// A fake sandbox is Sized, in proportion to its latency, and has no estimate of its own:
// the Preserver estimates its pause from the estimate it was given (what the last
// shutdown measured, image and record included) and the rate it measures. Its own
// estimate was its latency, which leaves the writes out.
func TestFakeSandboxIsSizedNotEstimated(t *testing.T) {
	n, _ := newFakeNode(t, t.TempDir(), time.Second)
	n.rt.(*Fake).Jitter = 0.5
	for range 3 {
		_, err := n.Create(t.Context(), 3600)
		require.NoError(t, err)
	}
	sbs, err := n.Running(t.Context())
	require.NoError(t, err)
	require.Len(t, sbs, 3)
	for _, sb := range sbs {
		_, estimated := sb.(pause.Estimated)
		assert.False(t, estimated, "no estimate of its own")
		sized, ok := sb.(pause.Sized)
		require.True(t, ok)
		want := int64(n.rt.(*Fake).Latency(sb.ID()).Seconds() * FakeBytesPerSecond)
		assert.Equal(t, want, sized.Size(), "its latency at 1 GiB/s")
	}
	assert.Zero(t, (&Fake{}).Size("a"), "no latency: unknown")
}

// NewRuntime lays a server's state directory out the same way for every example: fake
// images in images/, runsc's files in runsc/ and its own state in runsc/root/pidns-N-B-S.
func TestNewRuntimeLaysOutTheStateDirectory(t *testing.T) {
	rt, err := NewRuntime("fake", "/state", time.Second, 0.5)
	require.NoError(t, err)
	assert.Equal(t, &Fake{Dir: "/state/images", PauseLatency: time.Second, Jitter: 0.5}, rt)

	rt, err = NewRuntime("runsc", "/state", time.Second, 0)
	if usable := runsc.Usable(); usable != nil {
		assert.EqualError(t, err, usable.Error())
	} else {
		require.NoError(t, err)
		assert.Equal(t, &Runsc{Runtime: &runsc.Runtime{Root: "/state/runsc/root/" + pidNamespace()}, Dir: "/state/runsc"}, rt)
	}

	_, err = NewRuntime("docker", "/state", time.Second, 0)
	assert.ErrorContains(t, err, `"docker"`)
}

// With real gVisor: a sandbox paused by one Node is resumed by the next, and its counter
// goes on from where it was.
func TestRunscSandboxResumesAfterServerRestart(t *testing.T) {
	n, rt, st := newRunscNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := n.Create(ctx, 3600)
	require.NoError(t, err)
	require.Eventually(t, func() bool { c, err := rt.Bundle(a.ID).Counter(); return err == nil && c > 3 },
		30*time.Second, 20*time.Millisecond)
	_, err = n.Pause(ctx, a.ID)
	require.NoError(t, err)
	saved, err := rt.Bundle(a.ID).Counter()
	require.NoError(t, err)
	n.Close()

	n2, problems, err := NewNode(rt, st, nil)
	require.NoError(t, err)
	defer n2.Close()
	assert.Empty(t, problems)
	_, err = n2.Resume(ctx, a.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { c, err := rt.Bundle(a.ID).Counter(); return err == nil && c > saved+2 },
		30*time.Second, 20*time.Millisecond)
	counts, err := rt.Bundle(a.ID).Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "counter restarted: %v", counts)
	require.NoError(t, n2.Delete(ctx, a.ID))
	_, err = os.Stat(rt.Bundle(a.ID).Dir)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// A worker restarted in a new pod has a new PID namespace: the runsc state its
// predecessor left names PIDs that mean other processes here, so it is removed unread
// rather than force-deleted, while this namespace's own state and the shared images stay.
func TestRunscStateOfOtherPIDNamespacesIsForgotten(t *testing.T) {
	dir := t.TempDir()
	rt := NewRunsc(dir)
	assert.Equal(t, filepath.Join(dir, "root", pidNamespace()), rt.Runtime.Root)
	assert.Regexp(t, `^pidns-\d+-[0-9a-f]{8}-\d+$`, pidNamespace())

	foreign := filepath.Join(dir, "root", "pidns-1", "sb-1_sandbox:sb-1.state")
	own := filepath.Join(rt.Runtime.Root, "sb-2_sandbox:sb-2.state")
	image := filepath.Join(rt.Image("sb-1"), "checkpoint.img")
	for _, f := range []string{foreign, own, image} {
		require.NoError(t, os.MkdirAll(filepath.Dir(f), 0o700))
		require.NoError(t, os.WriteFile(f, []byte(`{"pid":2}`), 0o600))
	}

	require.NoError(t, rt.forgetOtherNamespaces())
	_, err := os.Stat(filepath.Dir(foreign))
	assert.ErrorIs(t, err, os.ErrNotExist, "the other namespace's state is gone")
	assert.FileExists(t, own, "this namespace's state stays for runsc to delete")
	assert.FileExists(t, image, "the checkpoint image stays to be restored")

	require.NoError(t, NewRunsc(t.TempDir()).forgetOtherNamespaces(), "no state yet is not an error")
}

// A PID namespace's inode is reused once the namespace is gone: the next pod's
// container can get the very number its predecessor had, and with it, were the
// runsc state keyed by the inode alone, the predecessor's state, whose PIDs runsc
// delete -force then SIGKILLs in the new namespace (the worker's own runsc, seen
// as "runsc delete -force: signal: killed" on a restore in the new pod). Two
// namespaces, one gone before the other, that share an inode have state of their
// own.
func TestNamespaceWithAReusedInodeHasRunscStateOfItsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "a new PID namespace needs root (run the tests as root)")
	}
	stateName := func() (ns, name string) {
		var out strings.Builder
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), roleEnv+"=state-name", pid1test.ProcEnv+"=1")
		cmd.Stdout = &out
		require.NoError(t, pid1test.StartPID1(t, cmd).Wait(t, 30*time.Second, "the namespace's process did not exit"), out.String())
		f := strings.Fields(out.String())
		require.Len(t, f, 2, out.String())
		return f[0], f[1]
	}
	seen := map[string]string{} // namespace -> its state's name, of namespaces gone
	for range 12 {
		ns, name := stateName()
		if prev, ok := seen[ns]; ok {
			assert.NotEqual(t, prev, name, "%s reused: its state must not be its predecessor's", ns)
			return
		}
		seen[ns] = name
	}
	t.Skipf("no PID namespace inode was reused in 12 namespaces on this kernel: %v", seen)
}

// A sandbox a client is pausing when the shutdown lists is still the
// shutdown's: if that pause fails (here its client gives up), the sandbox
// runs again after the last listing, and only the Preserver can pause it.
// It must be in the Report, and paused.
func TestSandboxWhoseClientPauseFailsDuringShutdownIsStillPreserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newFakeNode(t, t.TempDir(), 2*time.Second)
		a, err := n.Create(t.Context(), 3600)
		require.NoError(t, err)
		client, cancel := context.WithTimeout(t.Context(), time.Second) // gives up at 1s
		defer cancel()
		go func() { _, _ = n.Pause(client, a.ID) }()
		time.Sleep(500 * time.Millisecond)
		require.Equal(t, []Info{{ID: a.ID, State: Pausing, TimeoutS: 3600}}, n.List())

		p, err := pause.New(pause.ListFunc(n.Running), pause.Config{Limit: 4})
		require.NoError(t, err)
		ctx, stop := context.WithTimeout(t.Context(), time.Minute)
		defer stop()
		rep := p.Run(ctx, time.Time{})
		synctest.Wait()
		require.Len(t, rep.Entries, 1, "the sandbox in the client's pause is accounted for")
		assert.Equal(t, pause.Preserved, rep.Entries[0].Outcome)
		assert.Equal(t, 1, n.Count(Paused), "and paused once the client's pause failed")
		n.Close()
	})
}

// A resume whose client is already gone (its request's context cancelled)
// fails, and the sandbox stays paused: it must stay resumable, its image
// intact, not paused with nothing to resume from.
func TestResumeWhoseClientIsGoneLeavesTheSandboxResumable(t *testing.T) {
	n, _ := newFakeNode(t, t.TempDir(), time.Millisecond)
	a, err := n.Create(t.Context(), 3600)
	require.NoError(t, err)
	_, err = n.Pause(t.Context(), a.ID)
	require.NoError(t, err)

	gone, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = n.Resume(gone, a.ID)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, n.Count(Paused))

	r, err := n.Resume(t.Context(), a.ID)
	require.NoError(t, err, "the sandbox is resumed from its image")
	assert.Equal(t, Running, r.State)
}

// With real gVisor: a resume whose client gives up (its request's context ends: a
// deadline, a Ctrl-C, an HTTP client gone) once `runsc restore` has started gVisor's
// sandbox process. Killing the runsc client then left that process (runsc-sandbox and its
// gofer, holding the restored memory) running with no container in runsc's state: the
// node said "paused", `runsc delete -force` found nothing to stop, and a whole sandbox's
// memory leaked until the process ended, per resume given up (row 176's fault, in the
// runtime sandboxd and gvisor-worker share). A started restore now runs to its end
// whatever the client does: the sandbox runs, and the node says so.
func TestRunscResumeWhoseClientIsGoneLeavesNoSandboxBehind(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	a, err := n.Create(t.Context(), 3600)
	require.NoError(t, err)
	bundle := rt.Bundle(a.ID)
	require.Eventually(t, func() bool { c, err := bundle.Counter(); return err == nil && c > 1 }, 30*time.Second, 20*time.Millisecond)
	_, err = n.Pause(t.Context(), a.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(runsc.SandboxProcesses(bundle.Dir)) == 0 }, time.Minute, 10*time.Millisecond,
		"the paused sandbox's processes exit")
	t.Cleanup(func() { // whatever was left, of this test's bundle only
		for _, pid := range runsc.SandboxProcesses(bundle.Dir) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	})

	// The client gives up once the restore's sandbox process runs.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil && len(runsc.SandboxProcesses(bundle.Dir)) == 0 {
			<-tick.C
		}
		cancel()
	}()
	info, err := n.Resume(ctx, a.ID)
	cancel()
	t.Logf("resume: %v; the node lists %v; gVisor's processes for the bundle: %v", err, n.List(), runsc.SandboxProcesses(bundle.Dir))
	if errors.Is(err, context.Canceled) && len(runsc.SandboxProcesses(bundle.Dir)) == 0 {
		t.Skip("the client gave up before the restore started: nothing to check this run")
	}
	require.NoError(t, err, "a started restore runs to its end")
	assert.Equal(t, Running, info.State)
	state, err := rt.Runtime.State(context.Background(), a.ID)
	require.NoError(t, err, "runsc knows the container the restore started")
	assert.Equal(t, "running", state.Status)
	require.Eventually(t, func() bool { c, err := bundle.Counter(); return err == nil && c > 3 }, 30*time.Second, 20*time.Millisecond,
		"the restored sandbox counts on")
	require.NoError(t, n.Delete(context.Background(), a.ID))
	assert.Eventually(t, func() bool { return len(runsc.SandboxProcesses(bundle.Dir)) == 0 }, 30*time.Second, 10*time.Millisecond,
		"deleted: nothing of the sandbox runs")
}

// unresumable is a Fake whose Resume fails.
type unresumable struct{ *Fake }

func (unresumable) Resume(context.Context, string, string) error {
	return errors.New("restore failed (injected)")
}

// A pause whose record could not be written (the records directory gone, a full disk)
// is undone; when the undo fails too, the sandbox stays paused with no record, and the
// node logs it lost at exit. The Preserver's retry of it found it paused, "no longer
// running", and said vanished: the Report counted no loss for a sandbox the server
// knew it would lose. Its preserve fails for good instead.
func TestPausedButUnrecordedSandboxIsLostNotVanished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		st, err := store.Open(filepath.Join(dir, "records"))
		require.NoError(t, err)
		n, _, err := NewNode(unresumable{&Fake{Dir: filepath.Join(dir, "images"), PauseLatency: time.Second}}, st, nil)
		require.NoError(t, err)
		defer n.Close()
		a, err := n.Create(t.Context(), 3600)
		require.NoError(t, err)
		require.NoError(t, os.RemoveAll(filepath.Join(dir, "records")))

		p, err := pause.New(pause.ListFunc(n.Running), pause.Config{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Time{})

		require.Len(t, rep.Entries, 1)
		e := rep.Entries[0]
		assert.Equal(t, a.ID, e.ID)
		assert.Equal(t, pause.Failed, e.Outcome, e.Error)
		assert.Contains(t, e.Error, "resuming it failed")
		assert.Equal(t, 1, e.Attempts, "asking again cannot record it")
		assert.Equal(t, 1, rep.Lost())
	})
}

// undeletable is a record store whose Delete fails and leaves the record where it was
// (a read-only or failing records directory).
type undeletable struct{ recordStore }

func (undeletable) Delete(id string) error {
	return fmt.Errorf("store: delete %s: remove failed (injected)", id)
}

// Fault: a resume whose record could not be removed said only "resumed sandbox keeps a
// stale record" at WARN, and succeeded. The record was still there for the next server,
// which brought the sandbox back paused from its image of before the resume: everything
// it did since the resume lost, without a word. The resume is undone instead: the
// sandbox is paused again and recorded as it is now, and the resume fails naming the
// record; a restarted node brings back that sandbox, which resumes.
func TestResumeWhoseRecordCannotBeRemovedIsUndone(t *testing.T) {
	dir := t.TempDir()
	n, _ := newFakeNode(t, dir, time.Millisecond)
	a, err := n.Create(t.Context(), 3600)
	require.NoError(t, err)
	_, err = n.Pause(t.Context(), a.ID)
	require.NoError(t, err)
	n.st = undeletable{n.st}

	_, err = n.Resume(t.Context(), a.ID)
	require.Error(t, err, "a resume whose record stays must not report success")
	assert.ErrorContains(t, err, "remove failed (injected)")
	assert.ErrorContains(t, err, "record")
	assert.Equal(t, []Info{{ID: a.ID, State: Paused, TimeoutS: 3600}}, n.List(), "paused again, as its record says")
	n.Close()

	n2, problems := newFakeNode(t, dir, time.Millisecond)
	assert.Empty(t, problems)
	require.Equal(t, []Info{{ID: a.ID, State: Paused, TimeoutS: 3600}}, n2.List())
	r, err := n2.Resume(t.Context(), a.ID)
	require.NoError(t, err, "the record a restart reads has the sandbox's image of now")
	assert.Equal(t, Running, r.State)
}

// repauseFails is a Fake whose Pause fails once Fail is set: the undo of a resume. Err is
// the error, "checkpoint failed (injected)" when nil.
type repauseFails struct {
	*Fake
	Fail bool
	Err  error
}

func (f *repauseFails) Pause(ctx context.Context, id string) (string, error) {
	if f.Fail {
		if f.Err != nil {
			return "", f.Err
		}
		return "", errors.New("checkpoint failed (injected)")
	}
	return f.Fake.Pause(ctx, id)
}

// unrewritable is a record store whose Delete and Put fail, its records left as they were.
type unrewritable struct{ undeletable }

func (unrewritable) Put(r store.Record) error {
	return fmt.Errorf("store: put %s: write failed (injected)", r.ID)
}

// The undo of a resume whose record stays can fail in its turn: the sandbox is then left
// running with its stale record, or paused with its record not rewritten. Neither ends
// in silence: an ERROR line, and Resume's error names both failures and what is left.
func TestResumeWhoseUndoFailsSaysSoLoudly(t *testing.T) {
	setup := func(t *testing.T) (*Node, *repauseFails, *logbuf.Buffer, string) {
		dir := t.TempDir()
		st, err := store.Open(filepath.Join(dir, "records"))
		require.NoError(t, err)
		rt := &repauseFails{Fake: &Fake{Dir: filepath.Join(dir, "images"), PauseLatency: time.Millisecond}}
		var logs logbuf.Buffer
		n, _, err := NewNode(rt, st, slog.New(slog.NewTextHandler(&logs, nil)))
		require.NoError(t, err)
		t.Cleanup(n.Close)
		a, err := n.Create(t.Context(), 3600)
		require.NoError(t, err)
		_, err = n.Pause(t.Context(), a.ID)
		require.NoError(t, err)
		return n, rt, &logs, a.ID
	}

	t.Run("the sandbox cannot be paused again", func(t *testing.T) {
		n, rt, logs, id := setup(t)
		n.st, rt.Fail = undeletable{n.st}, true
		_, err := n.Resume(t.Context(), id)
		require.Error(t, err)
		assert.ErrorContains(t, err, "remove failed (injected)")
		assert.ErrorContains(t, err, "checkpoint failed (injected)")
		assert.ErrorContains(t, err, "stale record")
		assert.Equal(t, Running, n.List()[0].State, "the runtime left it running")
		assert.Contains(t, logs.String(), `level=ERROR msg="resumed sandbox keeps a stale record`)
	})
	// The sandbox died between its resume and the undo's pause (ErrDied): it was listed
	// running, its timeout armed for a dead sandbox, and the error said "it runs".
	t.Run("the sandbox died after its resume", func(t *testing.T) {
		n, rt, logs, id := setup(t)
		n.st, rt.Fail = undeletable{n.st}, true
		rt.Err = fmt.Errorf("%w: %w: its workload exited (injected)", ErrDied, pause.ErrGone)
		_, err := n.Resume(t.Context(), id)
		require.Error(t, err)
		assert.ErrorContains(t, err, "remove failed (injected)")
		assert.ErrorIs(t, err, ErrDied)
		assert.NotContains(t, err.Error(), "it runs")
		assert.Empty(t, n.List(), "a dead sandbox is listed no more")
		assert.Contains(t, logs.String(), `level=WARN msg="sandbox died before its checkpoint`)
	})
	// Paused again in an image that is not durable (ErrNotDurable): it is stopped, not
	// running as the node said.
	t.Run("the undo's image is not durable", func(t *testing.T) {
		n, rt, logs, id := setup(t)
		n.st, rt.Fail = undeletable{n.st}, true
		rt.Err = fmt.Errorf("%w: fsync failed (injected)", ErrNotDurable)
		_, err := n.Resume(t.Context(), id)
		require.Error(t, err)
		assert.ErrorContains(t, err, "remove failed (injected)")
		assert.ErrorIs(t, err, ErrNotDurable)
		assert.Equal(t, Paused, n.List()[0].State, "stopped in its image, not running")
		assert.Contains(t, logs.String(), "level=ERROR")
	})
	t.Run("its record cannot be rewritten", func(t *testing.T) {
		n, _, logs, id := setup(t)
		n.st = unrewritable{undeletable{n.st}}
		_, err := n.Resume(t.Context(), id)
		require.Error(t, err)
		assert.ErrorContains(t, err, "remove failed (injected)")
		assert.ErrorContains(t, err, "write failed (injected)")
		assert.Equal(t, Paused, n.List()[0].State, "paused again")
		assert.Contains(t, logs.String(), `level=ERROR msg="sandbox paused again after its resume, but its record was not rewritten`)
	})
}

// uncreatable is a Fake whose Create fails, and whose Destroy fails when Stuck is set.
type uncreatable struct {
	*Fake
	Stuck bool
}

func (uncreatable) Create(context.Context, string) error {
	return errors.New("runsc run: container started, then its client was killed (injected)")
}

func (f uncreatable) Destroy(ctx context.Context, id string) error {
	if f.Stuck {
		return errors.New("runsc delete -force: device busy (injected)")
	}
	return f.Fake.Destroy(ctx, id)
}

// Fault: a create that failed removed what it left with the runtime's Destroy, whose
// error was dropped (`_ = n.rt.Destroy(...)`): a runsc container started before the
// failure and not removed ran on, the node no longer listing it (so no Delete nor Close
// reached it), with no line saying so and the create's error saying only why it failed.
// Its error names both now, and the ID, and an ERROR line says what may be left.
func TestCreateWhoseCleanupFailsSaysWhatIsLeft(t *testing.T) {
	for _, stuck := range []bool{false, true} {
		t.Run(fmt.Sprintf("destroy fails: %v", stuck), func(t *testing.T) {
			dir := t.TempDir()
			st, err := store.Open(filepath.Join(dir, "records"))
			require.NoError(t, err)
			var logs logbuf.Buffer
			n, _, err := NewNode(uncreatable{Fake: &Fake{Dir: dir}, Stuck: stuck}, st, slog.New(slog.NewTextHandler(&logs, nil)))
			require.NoError(t, err)
			defer n.Close()

			_, err = n.Create(t.Context(), 60)
			require.Error(t, err)
			assert.ErrorContains(t, err, "client was killed (injected)")
			assert.Empty(t, n.List())
			if !stuck {
				assert.NotContains(t, err.Error(), "left")
				assert.NotContains(t, logs.String(), "level=ERROR")
				return
			}
			assert.ErrorContains(t, err, "device busy (injected)")
			assert.Regexp(t, `sb-[0-9a-f]{12}`, err.Error(), "names the sandbox left")
			assert.Contains(t, logs.String(), `level=ERROR msg="failed create left`)
		})
	}
}

// undestroyable is a Fake whose Destroy fails while Stuck is set.
type undestroyable struct {
	*Fake
	Stuck bool
}

func (f *undestroyable) Destroy(ctx context.Context, id string) error {
	if f.Stuck {
		return errors.New("runsc delete -force: signal: killed (injected)")
	}
	return f.Fake.Destroy(ctx, id)
}

// Fault: a delete whose runtime Destroy failed (runsc delete -force killed, a bundle that
// would not go) forgot the sandbox all the same, and removed its record: it could run on,
// or keep its image, while the node said "not found" to every retry, and the server's
// Close, which force-deletes the sandboxes it lists, no longer reached it. The sandbox now
// stays listed as it was, its record too, and a retry deletes it.
func TestDeleteWhoseDestroyFailsKeepsTheSandboxForARetry(t *testing.T) {
	for _, paused := range []bool{false, true} {
		t.Run(fmt.Sprintf("paused: %v", paused), func(t *testing.T) {
			dir := t.TempDir()
			st, err := store.Open(filepath.Join(dir, "records"))
			require.NoError(t, err)
			rt := &undestroyable{Fake: &Fake{Dir: filepath.Join(dir, "images"), PauseLatency: time.Millisecond}}
			n, _, err := NewNode(rt, st, nil)
			require.NoError(t, err)
			defer n.Close()
			a, err := n.Create(t.Context(), 3600)
			require.NoError(t, err)
			want := Running
			if paused {
				_, err = n.Pause(t.Context(), a.ID)
				require.NoError(t, err)
				want = Paused
			}

			rt.Stuck = true
			err = n.Delete(t.Context(), a.ID)
			require.ErrorContains(t, err, "signal: killed (injected)")
			assert.Equal(t, []Info{{ID: a.ID, State: want, TimeoutS: 3600}}, n.List(), "still there, as it was")
			recs, _, err := st.Load()
			require.NoError(t, err)
			assert.Len(t, recs, map[bool]int{false: 0, true: 1}[paused], "a paused one keeps its record")

			rt.Stuck = false
			require.NoError(t, n.Delete(t.Context(), a.ID), "the retry deletes it")
			assert.Empty(t, n.List())
			recs, _, err = st.Load()
			require.NoError(t, err)
			assert.Empty(t, recs)
		})
	}
}

// A delete whose client is already gone does not start: the sandbox runs on, as the node
// says, and pauses. The fake's Destroy forgot the sandbox and then returned the ended
// context's error: a node that keeps a sandbox whose Destroy failed would have listed one
// the fake no longer ran.
func TestDeleteWhoseClientIsGoneLeavesTheSandboxAsItWas(t *testing.T) {
	n, _ := newFakeNode(t, t.TempDir(), time.Millisecond)
	a, err := n.Create(t.Context(), 3600)
	require.NoError(t, err)
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, n.Delete(gone, a.ID), context.Canceled)
	assert.Equal(t, []Info{{ID: a.ID, State: Running, TimeoutS: 3600}}, n.List())
	_, err = n.Pause(t.Context(), a.ID)
	require.NoError(t, err, "it runs, as the node says")
}

// A sandbox destroyed whose record cannot be removed is gone, but the next server will
// list it paused, with no image to resume: the delete fails saying so, and an ERROR line.
func TestDeletedSandboxWhoseRecordStaysIsSaidLoudly(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "records"))
	require.NoError(t, err)
	var logs logbuf.Buffer
	n, _, err := NewNode(&Fake{Dir: filepath.Join(dir, "images"), PauseLatency: time.Millisecond}, st, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer n.Close()
	a, err := n.Create(t.Context(), 3600)
	require.NoError(t, err)
	_, err = n.Pause(t.Context(), a.ID)
	require.NoError(t, err)
	n.st = undeletable{n.st}

	err = n.Delete(t.Context(), a.ID)
	require.ErrorContains(t, err, "remove failed (injected)")
	assert.ErrorContains(t, err, "record stays")
	assert.Empty(t, n.List(), "destroyed")
	assert.Contains(t, logs.String(), `level=ERROR msg="deleted sandbox keeps its record`)
}

// Two Nodes seeded alike create the same IDs in the same order, and so (Fake.Latency)
// the same pause latencies: drainsim's two servers pause the same sandboxes. A Node
// restarted with the seed over the records of paused sandboxes passes over their IDs.
func TestSeededNodesCreateTheSameSandboxes(t *testing.T) {
	create := func(n *Node, k int) []string {
		var ids []string
		for range k {
			info, err := n.Create(t.Context(), 60)
			require.NoError(t, err)
			ids = append(ids, info.ID)
		}
		return ids
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	a, _ := newFakeNode(t, dirA, time.Millisecond)
	b, _ := newFakeNode(t, dirB, time.Millisecond)
	a.SeedIDs(42)
	b.SeedIDs(42)
	idsA, idsB := create(a, 5), create(b, 5)
	assert.Equal(t, idsA, idsB)
	c, _ := newFakeNode(t, t.TempDir(), time.Millisecond)
	c.SeedIDs(43)
	assert.NotEqual(t, idsA, create(c, 5), "another seed, other sandboxes")

	_, err := a.Pause(t.Context(), idsA[0])
	require.NoError(t, err)
	a.Close()
	again, _ := newFakeNode(t, dirA, time.Millisecond)
	again.SeedIDs(42)
	next := create(again, 2)
	assert.Equal(t, idsA[1:3], next, "the paused sandbox's ID is taken: the next ones follow")
}
