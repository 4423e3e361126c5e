//go:build !linux

package pid1

import "errors"

// hideProc is Linux's (noChildEnv): no built-in init runs elsewhere.
func hideProc() error { return errors.New("no built-in init outside Linux") }
