//go:build !unix

package startsig

import "os"

// name is sig as the platform names it.
func name(sig os.Signal) string { return sig.String() }
