//go:build !linux

package ublk

import (
	"context"
	"runtime"
)

// supported is true where ublk exists.
const supported = false

func kernelRelease() (string, error) { return runtime.GOOS, nil }

// Holders is not supported on this system.
func Holders(ctx context.Context, procRoot string, dev DevNum) ([]Holder, error) {
	return nil, errUnsupported
}

func stackHolders(sysRoot, name string, parts []partition) []Holder { return nil }

func scanHolders(ctx context.Context, procRoot string, devs []DevNum) (map[DevNum][]Holder, error) {
	return nil, errUnsupported
}
