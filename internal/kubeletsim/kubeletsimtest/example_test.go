package kubeletsimtest_test

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
)

// A test's use: start the server under test as the kubelet's container, its
// PID 1, wait until it handles SIGTERM (PID 1 gets no default action: a
// SIGTERM before its handler is dropped), and terminate it as the kubelet
// does; the test's cleanup takes whatever is left, the server's own children
// included; child.PID1() says whether it ran as PID 1 (as root: the machine
// gives it a PID namespace). (An Example has no *testing.T: exampleT stands
// for it.)
func Example() {
	t := &exampleT{}
	defer t.end()

	server := exec.Command("sh", "-c", `trap 'exit 0' TERM; sleep 300 & echo ready; wait`) // the server, its flags
	out, err := server.StdoutPipe()
	if err != nil {
		panic(err)
	}
	child := kubeletsimtest.Start(t, server)
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // ready: it handles SIGTERM
		panic(err)
	}
	tl, err := kubeletsim.Terminate(context.Background(), child, nil, 5*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("SIGKILL needed:", tl.Killed)
	fmt.Println("exit:", child.Err())
	// Output:
	// SIGKILL needed: false
	// exit: <nil>
}

// exampleT is the part of a *testing.T that Start uses; its cleanups run at
// end, last first, as a test's do when it ends.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()                           {}
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Errorf(format string, args ...any) { fmt.Printf(format+"\n", args...) }
func (t *exampleT) FailNow()                          { panic("the test failed") }
func (t *exampleT) Fatal(args ...any)                 { fmt.Println(args...); t.FailNow() }

// Skip, Start's word that the machine gives no PID namespace (not root), does
// not stop an Example, which cannot be skipped: Start goes on and runs the
// server as a plain child, which handles SIGTERM as the PID 1 would.
func (t *exampleT) Skip(...any) {}

func (t *exampleT) end() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}
