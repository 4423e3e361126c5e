// Package vmtest runs a package's tests inside a QEMU guest with a real
// kernel, so code that needs a kernel driver this machine lacks (ublk) is
// tested against the driver itself. Fake sysfs trees prove logic; only the
// real driver proves that a teardown order is safe.
//
// Typical wiring, in a package with guest tests:
//
//	func TestMain(m *testing.M) {
//		vmtest.MaybeInit() // in the guest, as process 1, this never returns
//		goleak.VerifyTestMain(m)
//	}
//
//	func TestGuestSomething(t *testing.T) {
//		vmtest.GuestOnly(t) // skipped on the host
//		// ... use /dev/ublk-control, /sys/block, ...
//	}
//
//	func TestInVM(t *testing.T) {
//		vmtest.RunGuestTests(t, vmtest.Config{Run: "^TestGuest", Modules: []string{"ublk_drv"}})
//	}
//
// RunGuestTests builds the package's test binary as the guest's /init
// (statically, CGO_ENABLED=0 go test -c; or with -race when the host test
// itself runs with -race, sharing its build cache, with the dynamic loader
// and libc packed alongside), packs it with the kernel modules into a
// gzipped newc initramfs, boots the cached kernel
// under QEMU (TCG), and reports every guest test as a subtest of the host
// test, with the guest's output. In the guest, /init mounts /proc, /sys,
// devtmpfs and a /tmp tmpfs, loads the modules with finit_module, runs the
// test binary again as its child with -test.v, relays its output to the
// serial console behind a marker, dumps the kernel log and powers off.
// .ci/setup-ublk-vm installs QEMU and caches the kernel (see Assets).
//
// Guarantees: a boot is bounded by Config.Timeout (QEMU is killed then,
// and Run returns within a second more); the guest test binary gets a
// shorter -test.timeout so a stuck test dumps its goroutines first. A
// guest test that fails, or never reports (the guest crashed, panicked or
// hung), fails the host test; the host knows which tests to expect from
// the binary's -test.list. Missing QEMU or kernel skips the host test,
// except under CI=true, where it fails.
package vmtest
