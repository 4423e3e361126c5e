//go:build !linux

package vmtest

import "errors"

// IsInit reports whether this process is the guest's /init; guests run
// Linux, so elsewhere it is always false.
func IsInit() bool { return false }

// MaybeInit does nothing outside Linux; see the Linux documentation.
func MaybeInit() {}

// KernelLog is not available outside Linux.
func KernelLog() ([]string, error) { return nil, errors.New("vmtest: no kernel log outside Linux") }
