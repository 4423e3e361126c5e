//go:build linux

package realkubelet

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/fakelogind"
	"github.com/drainkit/drainkit/internal/realpart"
)

// WithNodeShutdown is the Config of a Node whose kubelet can go through a
// graceful node shutdown with the given slice for its pods (they have no
// priority): ShutdownGracePeriod = slice, when dbus-daemon is on PATH; the
// zero Config otherwise, so that a test's other cases still run and its
// node-shutdown cases skip (requireNodeShutdown).
func WithNodeShutdown(slice time.Duration) Config {
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		return Config{}
	}
	return Config{ShutdownGracePeriod: slice}
}

// requireNodeShutdown skips t, or fails it under CI=true, when node cannot
// go through a graceful node shutdown (no dbus-daemon: see WithNodeShutdown).
func requireNodeShutdown(t testing.TB, node *Node) {
	t.Helper()
	if node.logind == nil {
		realpart.Missing(t, "realkubelet: graceful node shutdown needs dbus-daemon on PATH (apt-get install dbus-daemon)")
	}
}

// A NodeShutdown is a graceful node shutdown under way: logind's stand-in
// said PrepareForShutdown(true), and the kubelet terminates every pod with
// min(its grace, its priority group's slice), the groups one after the
// other, setting no deletionTimestamp, then releases its inhibitor lock.
type NodeShutdown struct {
	// Began is when PrepareForShutdown(true) was on the bus.
	Began time.Time
	// Lock is the inhibitor lock the kubelet held when the shutdown began,
	// nil when it held none: after a cancelled shutdown it may hold none
	// (see Cancel).
	Lock *fakelogind.Lock

	node *Node
}

// Shutdown begins a graceful node shutdown, as logind does when the
// machine is told to power off (spot preemption, a reboot). The Node must
// have been started with Config.ShutdownGracePeriod.
func (n *Node) Shutdown(t testing.TB) *NodeShutdown {
	t.Helper()
	if n.logind == nil {
		t.Fatal("realkubelet: Shutdown needs a Node started with Config.ShutdownGracePeriod")
	}
	var lock *fakelogind.Lock
	if locks := n.logind.Locks(); len(locks) > 0 {
		if last := locks[len(locks)-1]; isClosed(last.Held()) && !isClosed(last.Released()) {
			lock = last
		}
	}
	began := time.Now()
	if err := n.logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	return &NodeShutdown{Began: began, Lock: lock, node: n}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Done waits up to timeout until the kubelet is done with the shutdown,
// and returns when it was by its own record (the end it stores in
// ROOT/graceful_node_shutdown_state, just before it releases its lock):
// every pod of every group is dead, or each group's slice ran out (the
// kubelet does not wait for the SIGKILL that ends a pod past its slice). A
// real logind then lets the shutdown go on, at once if the kubelet held
// the only lock.
func (s *NodeShutdown) Done(t testing.TB, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// The kubelet's clock is this machine's: the start it records comes
		// after Began, unless the record is an earlier shutdown's.
		if start, end := s.Recorded(t); !start.Before(s.Began) && !end.IsZero() {
			return end
		}
		if time.Now().After(deadline) {
			t.Fatalf("realkubelet: the kubelet recorded no end of the shutdown %v after it began", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Recorded returns the start and end of the shutdown as the kubelet stored
// them (ROOT/graceful_node_shutdown_state, written when it began and when
// it released its lock); zero times when it has not.
func (s *NodeShutdown) Recorded(t testing.TB) (start, end time.Time) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.node.Dir, "kubelet", "graceful_node_shutdown_state"))
	if err != nil {
		return time.Time{}, time.Time{}
	}
	var st struct {
		StartTime time.Time `json:"startTime"`
		EndTime   time.Time `json:"endTime"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("realkubelet: the kubelet's graceful_node_shutdown_state: %v: %s", err, data)
	}
	return st.StartTime, st.EndTime
}

// Cancel waits until the kubelet is done with the shutdown, says it was
// cancelled (PrepareForShutdown(false), as logind does when the machine
// did not go down) and waits until the kubelet took a new lock, which it
// does once it admits pods again (a shutting-down kubelet rejects every
// new pod). It returns that lock.
//
// The kubelet v1.34.4 then closes its previous lock's descriptor number a
// second time (processShutdownEvent closed it already; acquireInhibitLock
// releases the old lock once more when it takes a new one): when the new
// descriptor got the same number, the new lock is released at once, and
// the next shutdown is delayed by no lock of the kubelet's.
func (s *NodeShutdown) Cancel(t testing.TB) *fakelogind.Lock {
	t.Helper()
	s.Done(t, 2*time.Minute)
	taken := len(s.node.logind.Locks())
	if err := s.node.logind.PrepareForShutdown(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock, err := s.node.logind.Taken(ctx, taken+1)
	if err != nil {
		t.Fatalf("realkubelet: the kubelet took no new inhibitor lock after the cancellation: %v", err)
	}
	return lock
}

// waitShutdownManager returns once the kubelet's shutdown manager holds
// its delay lock, when the Node has one: then it has read
// InhibitDelayMaxUSec, and subscribes to PrepareForShutdown next (the
// tests set a shutdown off only once a pod served for seconds). It fails
// the test when the manager did not start, quoting the kubelet's reason.
func (n *Node) waitShutdownManager(ctx context.Context, t testing.TB) {
	t.Helper()
	if n.logind == nil {
		return
	}
	lock, err := n.logind.Held(ctx)
	if err == nil && lock.PID() == n.kubelet.cmd.Process.Pid {
		return
	}
	log, _ := os.ReadFile(n.kubelet.log)
	var why []string
	for line := range strings.SplitSeq(string(log), "\n") {
		if strings.Contains(line, "shutdown manager") {
			why = append(why, line)
		}
	}
	if err == nil {
		t.Fatalf("realkubelet: the inhibitor lock is held by pid %d, not by the kubelet (%d)", lock.PID(), n.kubelet.cmd.Process.Pid)
	}
	t.Fatalf("realkubelet: the kubelet's shutdown manager took no inhibitor lock (%v); its log says:\n%s", err, strings.Join(why, "\n"))
}

// KubeletLog returns the lines of the kubelet's log so far that contain
// any of substrs, for a test's log.
func (n *Node) KubeletLog(substrs ...string) []string {
	data, _ := os.ReadFile(n.kubelet.log)
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		for _, s := range substrs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}
