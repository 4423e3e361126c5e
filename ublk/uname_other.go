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

// killDoomed kills nothing where there are no cgroups to tell doomed holders
// by.
func killDoomed(_ context.Context, _ string, held map[int][]Holder, _ map[DevNum]int) (string, []HolderFate) {
	var fates []HolderFate
	for id, hs := range held {
		for _, h := range hs {
			fates = append(fates, HolderFate{Holder: h, Device: id, Reason: "not Linux: no cgroups to tell a doomed holder by"})
		}
	}
	return "", fates
}
