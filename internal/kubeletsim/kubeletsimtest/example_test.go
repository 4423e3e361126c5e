package kubeletsimtest_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
)

// A test's use: start the server under test as the kubelet's container, and
// terminate it as the kubelet does; the test's cleanup takes whatever is left.
// (An Example has no *testing.T: exampleT stands for it.)
func Example() {
	t := &exampleT{}
	defer t.end()

	child := kubeletsimtest.Start(t, exec.Command("sleep", "300")) // the server, its flags
	tl, err := kubeletsim.Terminate(context.Background(), child, nil, 5*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("SIGKILL needed:", tl.Killed)
	fmt.Println("exit:", child.Err())
	// Output:
	// SIGKILL needed: false
	// exit: signal: terminated
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

func (t *exampleT) end() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}
