// Package fakeublk fakes what a ublk server looks like from the outside, so
// that the ublk teardown step, the drain orchestrator's end-to-end test and
// the examples can be exercised on machines without the ublk module: a
// sysfs tree laid out as the kernel lays out ublk devices (Tree), and a
// device daemon that runs as a real child process, owns devices in that
// tree and removes them over time after SIGTERM or a Unix-socket request
// (Start, MainIfDaemon).
//
// Typical wiring in a test binary:
//
//	func TestMain(m *testing.M) {
//		fakeublk.MainIfDaemon() // becomes the daemon when started by Start
//		goleak.VerifyTestMain(m)
//	}
//
//	func TestTeardown(t *testing.T) {
//		sys := t.TempDir()
//		d, err := fakeublk.Start(ctx, fakeublk.DaemonConfig{
//			SysRoot: sys,
//			Devices: []fakeublk.DeviceSpec{{ID: 0, Major: 259, Minor: 0, Reads: 2}},
//			Socket:  filepath.Join(t.TempDir(), "ublkd.sock"),
//			Mode:    fakeublk.Cooperative,
//		})
//		defer d.Close()
//		// point ublk at sys (ublkhook.Hooks.SysfsRoot) and a daemon for d.Pid()
//	}
//
// Wire protocol of the socket (AgentENV's): one request per connection, a
// 4-byte big-endian length then JSON. {"kind":"shutdown"} is answered
// {"status":"ok"} (not answered at all by a Silent daemon, which holds the
// connection until it exits) and starts the teardown; {"kind":"status"} returns the
// device IDs still present; anything else gets {"status":"error"} with the
// reason in "message", as AgentENV's daemon answers a request it failed.
// Once its teardown has begun (a request, SIGTERM, its parent's exit) the
// daemon reads no request, as AgentENV's, whose accept loop ends then while
// its socket stays bound: a connection is taken and left unanswered until
// the daemon exits.
//
// Guarantees: Start returns by ctx's deadline (killing the child if it was
// not ready); Close kills and reaps the child; on Linux a child never
// outlives the process that started it. Everything else is test scaffolding:
// this package is internal and not a stable API.
package fakeublk
