//go:build !linux

package pid1

import (
	"os"

	"github.com/drainkit/drainkit/internal/pid1/ready"
)

// ChildEnv is the environment variable that marks the child the init started.
const ChildEnv = "DRAINKIT_PID1_CHILD"

// Init does nothing but remove ChildEnv outside Linux: the init needs /proc/self/exe,
// Pdeathsig and PID namespaces.
func Init() { _ = os.Unsetenv(ChildEnv) }

// Ready does nothing outside Linux: no init holds the program's signals.
func Ready() { ready.Ready() }
