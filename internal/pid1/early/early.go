package early

import "os"

// ChildEnv is the environment variable that marks the child of the built-in init
// (pid1.ChildEnv): the child is not PID 1 and catches nothing here.
const ChildEnv = "DRAINKIT_PID1_CHILD"

// caught is the channel the package's initialisation made in PID 1 (catch_unix.go);
// nil in any other process, and outside Unix, where no process is PID 1 of a namespace.
var caught chan os.Signal

// Signals returns the channel on which every signal but SIGURG and SIGCHLD has been
// caught since this package was initialised, in PID 1 of a PID namespace that is not the built-in init's child,
// and nil in any other process.
func Signals() chan os.Signal { return caught }
