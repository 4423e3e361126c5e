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
// included. (An Example has no *testing.T: exampleT stands for it.)
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
	fmt.Println("PID 1:", child.PID1())
	fmt.Println("SIGKILL needed:", tl.Killed)
	fmt.Println("exit:", child.Err())
	// Output:
	// PID 1: true
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
func (t *exampleT) Skip(args ...any)                  { panic(fmt.Sprint(args...)) }

func (t *exampleT) end() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}
