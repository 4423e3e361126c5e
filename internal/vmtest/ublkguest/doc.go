// Package ublkguest holds the guest tests that run drainkit's ublk
// teardown step against the real ublk driver inside a QEMU guest
// (internal/vmtest), and the helpers they share: a "VMM" process holding
// a device open (Holder), a writer looping on a device (Writer), the
// checks a safe teardown must pass (CheckSafeTeardown) and the wrong order
// those checks must catch (KillFirst). Fake sysfs trees prove the step's
// logic; only the real driver proves its order safe.
//
// The host runs them with:
//
//	go test ./internal/vmtest/ublkguest/ -run TestInVM
//
// which boots the kernel cached by .ci/setup-ublk-vm (Debian 12's 6.12
// cloud kernel, a kernel without the ublk cancel fix, so the step's
// vulnerable-kernel rule is the one exercised) and reports each guest test
// as a subtest.
//
// Guarantees: the whole boot is bounded by the vmtest timeout; each guest
// test bounds every wait with a context. A guest kernel that logs a bug,
// warning, oops or hung task fails the run.
package ublkguest
