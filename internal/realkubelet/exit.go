//go:build linux

package realkubelet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// ContainerID returns the containerd ID of the running container of the
// static pod name (Pod names its one container as the pod), waiting up to
// within for it to appear. It fails the test otherwise.
func (n *Node) ContainerID(t testing.TB, name string, within time.Duration) string {
	t.Helper()
	filter := fmt.Sprintf(`labels."io.kubernetes.pod.name"==%s-%s,labels."io.kubernetes.container.name"==%s`, name, NodeName, name)
	deadline := time.Now().Add(within)
	for {
		out, err := exec.Command("ctr", "--address", n.sock, "--namespace", "k8s.io", "containers", "ls", "-q", filter).Output()
		if ids := strings.Fields(string(out)); err == nil && len(ids) == 1 {
			return ids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("realkubelet: no container of pod %s after %v (ctr: %v, %q)", name, within, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An ExitWatch sees a container end as containerd reports it (its
// /tasks/exit event, from the shim): the moment and the exit status. Under
// runsc the container's processes live inside gVisor's sentry, not on the
// host, so a Watch (a pidfd) cannot see them; an ExitWatch works with
// either runtime.
type ExitWatch struct {
	id     string
	cancel context.CancelFunc
	exits  chan taskExit
	done   chan error

	mu   sync.Mutex
	seen []string // the exits of other tasks, for the error
}

// taskExit is containerd's /tasks/exit event as ctr events prints it.
type taskExit struct {
	ContainerID string    `json:"container_id"`
	ID          string    `json:"id"`
	ExitStatus  uint32    `json:"exit_status"` // omitted when 0
	ExitedAt    time.Time `json:"exited_at"`   // RFC 3339, from the shim
}

// WatchExit starts watching containerd's events for the exit of container
// id (see ContainerID). Start it before the exit can happen: events before
// it are not seen.
func (n *Node) WatchExit(t testing.TB, id string) *ExitWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "ctr", "--address", n.sock, "events", `topic=="/tasks/exit"`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("realkubelet: ctr events: %v", err)
	}
	w := &ExitWatch{id: id, cancel: cancel, exits: make(chan taskExit, 1), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			// TIMESTAMP NAMESPACE /tasks/exit {"container_id":...}
			line := sc.Text()
			i := strings.Index(line, " /tasks/exit {")
			if i < 0 || sent {
				continue
			}
			var e taskExit
			if json.Unmarshal([]byte(line[i+len(" /tasks/exit "):]), &e) == nil && e.ContainerID == id && e.ID == id {
				w.exits <- e
				sent = true
				continue
			}
			w.mu.Lock()
			w.seen = append(w.seen, line)
			w.mu.Unlock()
		}
		w.done <- cmd.Wait()
	}()
	t.Cleanup(w.stop)
	return w
}

// Wait returns when the container exited and its exit status (137: killed
// by SIGKILL), or an error after within.
func (w *ExitWatch) Wait(within time.Duration) (time.Time, uint32, error) {
	defer w.stop()
	select {
	case e := <-w.exits:
		return e.ExitedAt, e.ExitStatus, nil
	case err := <-w.done:
		w.done <- err
		return time.Time{}, 0, fmt.Errorf("realkubelet: ctr events ended before the exit: %v", err)
	case <-time.After(within):
		w.mu.Lock()
		defer w.mu.Unlock()
		return time.Time{}, 0, fmt.Errorf("realkubelet: container %s is still running (other exits seen: %q)", w.id, w.seen)
	}
}

// stop ends ctr events and waits for its reader; it may run twice.
func (w *ExitWatch) stop() {
	w.cancel()
	err := <-w.done
	w.done <- err
}
