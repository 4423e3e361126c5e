package ublkguest_test

import (
	"errors"
	"fmt"

	"github.com/drainkit/drainkit/internal/vmtest/ublkguest"
)

// Acknowledged writes must be found in the backing store after a
// teardown; failed ones are not checked.
func ExampleVerifyAcked() {
	disk := make([]byte, 4*ublkguest.BlockSize)
	copy(disk[ublkguest.BlockSize:], ublkguest.Pattern(ublkguest.BlockSize, 7))
	writes := []ublkguest.Write{
		{Off: ublkguest.BlockSize, Tag: 7},                             // acknowledged and present
		{Off: 2 * ublkguest.BlockSize, Tag: 7},                         // acknowledged but lost
		{Off: 3 * ublkguest.BlockSize, Tag: 7, Err: errors.New("EIO")}, // failed: not checked
	}
	for _, err := range ublkguest.VerifyAcked(disk, writes) {
		fmt.Println(err)
	}
	// Output:
	// acknowledged write at 8192 lost: block starts 00000000000000000000000000000000
}
