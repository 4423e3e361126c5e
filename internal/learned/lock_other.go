//go:build !unix

package learned

import "os"

// flock does nothing where flock(2) does not exist: the lock is always
// taken.
func flock(*os.File) error { return nil }
