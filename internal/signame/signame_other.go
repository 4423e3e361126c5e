//go:build !unix

package signame

import "os"

// Name is sig as the platform names it.
func Name(sig os.Signal) string { return sig.String() }
