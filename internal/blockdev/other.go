//go:build !linux

package blockdev

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var errUnsupported = fmt.Errorf("ublk: holders scan: not supported on this system: %w", errors.ErrUnsupported)

// Holders is not supported on this system.
func Holders(ctx context.Context, procRoot string, dev DevNum) ([]Holder, error) {
	return nil, errUnsupported
}

// Scan is not supported on this system.
func Scan(ctx context.Context, procRoot string, devs []DevNum) (map[DevNum][]Holder, error) {
	return nil, errUnsupported
}

// ScanWithHook is not supported on this system.
func ScanWithHook(ctx context.Context, procRoot string, devs []DevNum, before func(dir string)) (map[DevNum][]Holder, error) {
	return nil, errUnsupported
}

// FDHolders finds nothing on this system.
func FDHolders(dir string, want map[DevNum]bool, found func(DevNum, string)) {}

// StackHolders finds nothing on this system.
func StackHolders(sysRoot, name string, parts []Partition) ([]Holder, error) { return nil, nil }

// MapsWait is the longest MapHolders waits for one process's mappings.
const MapsWait = 250 * time.Millisecond

// MapHolders finds nothing on this system.
func MapHolders(dir string, want map[DevNum]bool, found func(DevNum, string)) error { return nil }

// LoopHolders finds nothing on this system.
func LoopHolders(ctx context.Context, sysRoot string, devs []DevNum, before func(path string)) (map[DevNum][]Holder, error) {
	return nil, nil
}

// FileSystemHolders finds nothing on this system.
func FileSystemHolders(ctx context.Context, sysRoot string, devs map[string]DevNum, before func(path string)) (map[DevNum][]Holder, error) {
	return nil, nil
}

// JournalHolders finds nothing on this system.
func JournalHolders(ctx context.Context, procRoot string, devs map[string]DevNum, before func(path string)) (map[DevNum][]Holder, error) {
	return nil, nil
}

// CharHolders finds nothing on this system.
func CharHolders(ctx context.Context, procRoot string, devs []DevNum) (map[DevNum][]int, map[int]error, error) {
	return nil, nil, nil
}

// CharHoldersWithHook finds nothing on this system.
func CharHoldersWithHook(ctx context.Context, procRoot string, devs []DevNum, before func(dir string)) (map[DevNum][]int, map[int]error, error) {
	return nil, nil, nil
}
