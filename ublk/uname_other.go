//go:build !linux

package ublk

import (
	"context"
	"os"
	"runtime"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// supported is true where ublk exists.
const supported = false

func kernelRelease() (string, error) { return runtime.GOOS, nil }

// inode is 0 where no sysfs gives a ublk device an entry to tell it by.
func inode(os.FileInfo) uint64 { return 0 }

// killDoomed kills nothing where there are no cgroups to tell doomed holders
// by.
func killDoomed(_ context.Context, _ string, held map[int][]Holder, _ map[blockdev.DevNum]int, _ int) (string, []HolderFate) {
	var fates []HolderFate
	for id, hs := range held {
		for _, h := range hs {
			fates = append(fates, HolderFate{Holder: h, Device: id, Reason: "not Linux: no cgroups to tell a doomed holder by"})
		}
	}
	return "", fates
}

// daemonDoomed knows no daemon's fate where there are no cgroups.
func daemonDoomed(context.Context, string, int) (bool, string) {
	return false, "not Linux: no cgroups to tell the daemon's fate by"
}

// othersDevices tells no device apart where there is no procfs to read.
func othersDevices(context.Context, string, string, []Device, int, func(string), func(string)) (map[int]string, []int) {
	return nil, nil
}

// daemonServes finds no device served where there is no procfs to read.
func daemonServes(context.Context, string, string, []Device, int) (map[int]string, error) {
	return nil, nil
}

// ublkServers finds no server where there is no procfs to read. Its maps
// are empty, not nil: the last resort adds to the second what it could not
// read, as it does on Linux.
func ublkServers(context.Context, string, string, []Device, []int) (map[int][]int, map[int]error) {
	return map[int][]int{}, map[int]error{}
}
