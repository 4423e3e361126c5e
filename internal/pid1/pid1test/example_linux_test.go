package pid1test_test

import (
	"fmt"
	"os"

	"github.com/drainkit/drainkit/internal/pid1/pid1test"
)

// The role process's TestMain calls MountProc first. Started by StartPID1 with ProcEnv in
// its environment, it mounts the /proc of its own PID namespace; anywhere else (here, the
// test process) MountProc does nothing.
func Example() {
	if err := pid1test.MountProc(); err != nil {
		fmt.Println("mounting /proc:", err)
		os.Exit(1)
	}
	_, asked := os.LookupEnv(pid1test.ProcEnv)
	fmt.Println("asked to mount /proc:", asked)
	// Output: asked to mount /proc: false
}
