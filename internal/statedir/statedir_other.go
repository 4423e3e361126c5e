//go:build !unix

package statedir

import "os"

// tryLock takes nothing where flock(2) does not exist: the lock is always taken.
// (drainkit plan, which reads internal/learned, builds there; the servers do not.)
func tryLock(*os.File) (bool, error) { return true, nil }
