// Package fakelogind is a stand-in for systemd-logind on a private D-Bus
// system bus, so that a real kubelet can run a graceful node shutdown on a
// machine without systemd. The kubelet's shutdown manager
// (k8s.io/kubernetes/pkg/kubelet/nodeshutdown, systemd/inhibit_linux.go)
// reads logind's InhibitDelayMaxUSec, takes a delay inhibitor lock with
// Manager.Inhibit (a file descriptor it holds until it is done), listens
// for the PrepareForShutdown signal, and on PrepareForShutdown(true)
// terminates its pods and closes the descriptor.
//
//	lg, err := fakelogind.Start(dir, fakelogind.Config{}) // dbus-daemon on dir/system_bus_socket
//	cmd.Env = append(cmd.Environ(), lg.Env())            // DBUS_SYSTEM_BUS_ADDRESS for the kubelet only
//	lock, err := lg.Held(ctx)                             // the kubelet's lock, once it holds it
//	err = lg.PrepareForShutdown(true)                     // the node is going down
//	<-lock.Released()                                     // the kubelet is done with its pods
//	err = lg.PrepareForShutdown(false)                    // cancelled: the kubelet takes a new lock
//	lg.Close()
//
// The bus is Debian's dbus-daemon (package dbus-daemon) with a
// configuration of its own under dir, a child of the calling process; the
// protocol on our side is github.com/godbus/dbus/v5, the library the
// kubelet itself speaks it with. Only what the kubelet calls is there: the
// Inhibit method, the read-only InhibitDelayMaxUSec property (reported as
// Config.InhibitDelayMax, an hour by default, so that the kubelet never
// tries to raise it through systemd, which is absent) and the
// PrepareForShutdown signal.
//
// Guarantees: Close stops the bus, ends every goroutine Start began and
// closes every descriptor kept for a lock; a lock counts as held only once
// its holder's process has the descriptor (its /proc/PID/fd), and as
// released when the last copy of it is closed.
package fakelogind
