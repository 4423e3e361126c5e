// Package ublkserver is a minimal ublk server for tests: it creates ublk
// block devices backed by memory and serves their queues through io_uring,
// as a real ublk daemon does. The teardown step is only proven safe against
// the real driver, and the public Go ublk servers are not available here,
// so the project has its own.
//
// Typical wiring, inside a guest test (internal/vmtest) where the ublk
// driver is loaded:
//
//	func TestMain(m *testing.M) {
//		vmtest.MaybeInit()
//		ublkserver.MaybeDaemon() // the re-executed binary becomes the daemon
//		goleak.VerifyTestMain(m)
//	}
//
//	d, err := ublkserver.StartDaemon(ctx, ublkserver.DaemonConfig{Mode: ublkserver.Hung})
//	// /dev/ublkb<d.Devices[0]> is live; SIGTERM it, drive the teardown step at d.Pid() ...
//
// or in process: s, err := ublkserver.Start(ctx, ublkserver.Config{}); defer s.Stop(ctx).
//
// What it does: ADD_DEV, SET_PARAMS and START_DEV on /dev/ublk-control
// (IORING_OP_URING_CMD on an SQE128 ring, internal/uring); per queue, one
// locked OS thread that maps the driver's descriptor array from
// /dev/ublkcN, keeps a FETCH_REQ in the kernel for every tag and answers
// each request with COMMIT_AND_FETCH_REQ after copying between its buffer
// and the in-memory disk. Stop uses the safe order: STOP_DEV while the
// queues serve, join the queues, close /dev/ublkcN, DEL_DEV.
//
// Guarantees: Start and Stop are bounded by their context for the control
// commands they wait on (a command already taken by the kernel is not
// cancelled). Reads return what was written. A frozen server (Freeze, or
// the Hung daemon after SIGTERM) holds every new request in flight until
// Thaw, which makes a STOP_DEV wait too: the kernel removes the disk only
// after in-flight requests complete. The daemon modes (Cooperative, Slow,
// Hung) model the daemons the teardown step meets.
//
// The package is Linux-only; elsewhere it holds only Config and the UAPI
// encoding.
package ublkserver
