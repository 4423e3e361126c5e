//go:build !linux

package vmtest

// IsInit reports whether this process is the guest's /init; guests run
// Linux, so elsewhere it is always false.
func IsInit() bool { return false }

// MaybeInit does nothing outside Linux; see the Linux documentation.
func MaybeInit() {}
