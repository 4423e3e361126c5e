//go:build linux

package fakelogind

import (
	"bufio"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

// What logind is called on the bus.
const (
	Service          = "org.freedesktop.login1"
	Path             = dbus.ObjectPath("/org/freedesktop/login1")
	ManagerInterface = "org.freedesktop.login1.Manager"
)

// EnvBusAddress is the variable through which libdbus, sd-bus and godbus
// find the system bus (the kubelet's dbus.SystemBus honours it).
const EnvBusAddress = "DBUS_SYSTEM_BUS_ADDRESS"

// DefaultInhibitDelayMax is the InhibitDelayMaxUSec reported when
// Config.InhibitDelayMax is zero: longer than any shutdownGracePeriod a test
// configures, so that the kubelet does not try to raise it (it would write
// /etc/systemd/logind.conf.d and ask systemd over the bus to reload logind).
const DefaultInhibitDelayMax = time.Hour

// handoverTimeout bounds how long a lock's descriptor may take to show up
// in its holder's descriptor table: it takes milliseconds; a holder that
// closed it before it was seen there never held it.
const handoverTimeout = 2 * time.Second

// Config is how a Logind answers. The zero value reports
// DefaultInhibitDelayMax and runs dbus-daemon from PATH.
type Config struct {
	// InhibitDelayMax is logind's InhibitDelayMaxUSec: the longest a delay
	// lock may hold a shutdown. It must be >= 0; 0 means
	// DefaultInhibitDelayMax. The stand-in itself never enforces it.
	InhibitDelayMax time.Duration
	// DBusDaemon is the dbus-daemon binary; empty means dbus-daemon on
	// PATH.
	DBusDaemon string
}

// A Logind is dbus-daemon serving as a system bus, with the name
// org.freedesktop.login1 owned by this process.
type Logind struct {
	addr    string
	daemon  *exec.Cmd
	exited  chan struct{} // closed when dbus-daemon has exited
	conn    *dbus.Conn
	closing chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	err     error

	mu      sync.Mutex
	locks   []*Lock
	changed chan struct{} // closed and replaced when a lock is held or released
}

// A Lock is one inhibitor lock taken with Manager.Inhibit: logind's end of
// it is the read end of a pipe whose write end the caller holds; closing
// that end releases the lock.
type Lock struct {
	// What, Who, Why and Mode are Inhibit's arguments.
	What, Who, Why, Mode string
	// Sender is the caller's unique bus name.
	Sender string
	// Taken is when Inhibit was called.
	Taken time.Time

	read, write *os.File
	writeFD     int // write's descriptor in this process
	closeWrite  sync.Once
	held        chan struct{}
	released    chan struct{}
	pid         int       // set before held is closed
	releasedAt  time.Time // set before released is closed
}

// Held is closed once the caller's process was seen with the lock's
// descriptor and logind's copy of it is closed: from then on, the caller's
// close releases the lock. It stays open for a lock whose descriptor was
// not seen in its caller's process within 2 s (closed at once, or the
// caller died).
func (k *Lock) Held() <-chan struct{} { return k.held }

// PID is the process that holds the lock; 0 until Held is closed.
func (k *Lock) PID() int {
	select {
	case <-k.held:
		return k.pid
	default:
		return 0
	}
}

// Released is closed when the last copy of the lock's descriptor is
// closed: the holder let the shutdown go on (or died). For a lock never
// held, that is when logind gave up seeing it handed over.
func (k *Lock) Released() <-chan struct{} { return k.released }

// ReleasedAt is when the lock was released; zero until Released is closed.
func (k *Lock) ReleasedAt() time.Time {
	select {
	case <-k.released:
		return k.releasedAt
	default:
		return time.Time{}
	}
}

// Start starts dbus-daemon as a system bus listening on
// dir/system_bus_socket (its configuration and log in dir too), connects to
// it, takes the name org.freedesktop.login1 and serves logind's Manager on
// it. dir must exist; the socket's path must fit a unix socket's 107 bytes.
// Close stops it all.
func Start(dir string, cfg Config) (*Logind, error) {
	if cfg.InhibitDelayMax < 0 {
		return nil, fmt.Errorf("fakelogind: Config.InhibitDelayMax must be >= 0, got %v", cfg.InhibitDelayMax)
	}
	delay := cfg.InhibitDelayMax
	if delay == 0 {
		delay = DefaultInhibitDelayMax
	}
	bin := cfg.DBusDaemon
	if bin == "" {
		p, err := exec.LookPath("dbus-daemon")
		if err != nil {
			return nil, errors.New("fakelogind: dbus-daemon not on PATH (apt-get install dbus-daemon)")
		}
		bin = p
	}
	sock := filepath.Join(dir, "system_bus_socket")
	if len(sock) > 107 {
		return nil, fmt.Errorf("fakelogind: the socket path %s is longer than a unix socket's 107 bytes", sock)
	}
	conf := filepath.Join(dir, "system-bus.conf")
	if err := os.WriteFile(conf, []byte(busConfig(sock)), 0o644); err != nil {
		return nil, fmt.Errorf("fakelogind: %w", err)
	}
	logf, err := os.Create(filepath.Join(dir, "dbus-daemon.log"))
	if err != nil {
		return nil, fmt.Errorf("fakelogind: %w", err)
	}
	defer logf.Close()
	addrR, addrW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("fakelogind: %w", err)
	}
	defer addrR.Close()
	cmd := exec.Command(bin, "--config-file="+conf, "--nofork", "--nopidfile", "--nosyslog", "--print-address=1")
	cmd.Stdout, cmd.Stderr = addrW, logf
	// It dies with this process even if Close is never called.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	addrW.Close()
	if err != nil {
		return nil, fmt.Errorf("fakelogind: starting %s: %w", bin, err)
	}
	l := &Logind{daemon: cmd, exited: make(chan struct{}), closing: make(chan struct{}), changed: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(l.exited) }()

	// dbus-daemon prints its address once it listens; it closes its
	// standard output only when it exits.
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(addrR).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case l.addr = <-line:
	case <-time.After(30 * time.Second):
	}
	if l.addr == "" {
		l.stopDaemon()
		<-line
		log, _ := os.ReadFile(logf.Name())
		return nil, fmt.Errorf("fakelogind: dbus-daemon printed no address (%s): %s", cmd.ProcessState, strings.TrimSpace(string(log)))
	}
	if err := l.serve(delay); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// serve connects to the bus, exports the Manager and takes logind's name.
func (l *Logind) serve(delay time.Duration) error {
	conn, err := dbus.Connect(l.addr)
	if err != nil {
		return fmt.Errorf("fakelogind: connecting to %s: %w", l.addr, err)
	}
	l.conn = conn
	if err := conn.Export(manager{l}, Path, ManagerInterface); err != nil {
		return fmt.Errorf("fakelogind: %w", err)
	}
	if _, err := prop.Export(conn, Path, prop.Map{ManagerInterface: {
		"InhibitDelayMaxUSec": {Value: uint64(delay / time.Microsecond), Emit: prop.EmitFalse},
	}}); err != nil {
		return fmt.Errorf("fakelogind: %w", err)
	}
	reply, err := conn.RequestName(Service, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("fakelogind: requesting %s: %w", Service, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return fmt.Errorf("fakelogind: %s is owned by another connection (reply %d)", Service, reply)
	}
	return nil
}

// Address is the bus's address, for DBUS_SYSTEM_BUS_ADDRESS.
func (l *Logind) Address() string { return l.addr }

// Env is "DBUS_SYSTEM_BUS_ADDRESS=" + Address(), for a child's environment.
func (l *Logind) Env() string { return EnvBusAddress + "=" + l.addr }

// PrepareForShutdown emits logind's PrepareForShutdown(active) signal:
// true when a shutdown begins, false when one is cancelled (or the machine
// came back). It returns once the signal is on the bus.
func (l *Logind) PrepareForShutdown(active bool) error {
	if err := l.conn.Emit(Path, ManagerInterface+".PrepareForShutdown", active); err != nil {
		return fmt.Errorf("fakelogind: emitting PrepareForShutdown(%v): %w", active, err)
	}
	return nil
}

// Held returns the latest lock that is held and not released, waiting for
// one until ctx ends, Close is called, or dbus-daemon exits.
func (l *Logind) Held(ctx context.Context) (*Lock, error) {
	for {
		select {
		case <-l.closing:
			return nil, errors.New("fakelogind: closed")
		default:
		}
		l.mu.Lock()
		changed := l.changed
		var found *Lock
		for _, k := range l.locks {
			if isClosed(k.held) && !isClosed(k.released) {
				found = k
			}
		}
		l.mu.Unlock()
		if found != nil {
			return found, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("fakelogind: no inhibitor lock held: %w", ctx.Err())
		case <-l.closing:
			return nil, errors.New("fakelogind: closed")
		case <-l.exited:
			return nil, fmt.Errorf("fakelogind: dbus-daemon exited (%s)", l.daemon.ProcessState)
		}
	}
}

// Taken returns the n-th lock taken (from 1), waiting for it until ctx
// ends, Close is called, or dbus-daemon exits. Taken(ctx, len(Locks())+1)
// waits for the next Inhibit call.
func (l *Logind) Taken(ctx context.Context, n int) (*Lock, error) {
	if n < 1 {
		return nil, fmt.Errorf("fakelogind: Taken counts locks from 1, got %d", n)
	}
	for {
		l.mu.Lock()
		changed, locks := l.changed, l.locks
		l.mu.Unlock()
		if len(locks) >= n {
			return locks[n-1], nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("fakelogind: no lock number %d (%d taken): %w", n, len(locks), ctx.Err())
		case <-l.closing:
			return nil, errors.New("fakelogind: closed")
		case <-l.exited:
			return nil, fmt.Errorf("fakelogind: dbus-daemon exited (%s)", l.daemon.ProcessState)
		}
	}
}

// Locks returns every lock taken so far, in the order they were.
func (l *Logind) Locks() []*Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Lock(nil), l.locks...)
}

// Close closes the connection, ends the goroutines of the locks, closes
// the descriptors kept for them and stops dbus-daemon (SIGTERM, SIGKILL
// after 5 s). It returns the connection's error, if any; calling it again
// returns the same.
func (l *Logind) Close() error {
	l.once.Do(func() {
		close(l.closing)
		if l.conn != nil {
			l.err = l.conn.Close()
		}
		l.mu.Lock()
		for _, k := range l.locks {
			k.read.Close() // ends its watch's read
		}
		l.mu.Unlock()
		l.wg.Wait()
		for _, k := range l.Locks() {
			k.closeWrite.Do(func() { k.write.Close() })
		}
		l.stopDaemon()
	})
	return l.err
}

func (l *Logind) stopDaemon() {
	_ = l.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.exited:
		return
	case <-time.After(5 * time.Second):
	}
	_ = syscall.Kill(-l.daemon.Process.Pid, syscall.SIGKILL)
	<-l.exited
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// notify wakes Held's waiters.
func (l *Logind) notify() {
	l.mu.Lock()
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// manager is org.freedesktop.login1.Manager: the one method the kubelet
// calls.
type manager struct{ l *Logind }

// Inhibit takes an inhibitor lock: logind keeps the read end of a pipe
// and answers with the write end, which the caller closes to release it.
func (m manager) Inhibit(sender dbus.Sender, what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	if what == "" || (mode != "delay" && mode != "block") {
		return -1, dbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{fmt.Sprintf("fakelogind: Inhibit(what=%q, mode=%q): what must be set and mode delay or block", what, mode)})
	}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, dbus.MakeFailedError(err)
	}
	k := &Lock{What: what, Who: who, Why: why, Mode: mode, Sender: string(sender), Taken: time.Now(),
		read: r, write: w, writeFD: int(w.Fd()), held: make(chan struct{}), released: make(chan struct{})}
	l := m.l
	l.mu.Lock()
	select {
	case <-l.closing:
		l.mu.Unlock()
		r.Close()
		w.Close()
		return -1, dbus.MakeFailedError(errors.New("fakelogind: closed"))
	default:
	}
	l.locks = append(l.locks, k)
	l.wg.Add(1)
	l.mu.Unlock()
	l.notify()
	go l.watch(k)
	return dbus.UnixFD(k.writeFD), nil
}

// watch hands k over and waits for its release. The reply that carries
// the write end is sent after Inhibit returns, so logind's copy may be
// closed only once the caller's process has the descriptor: then the
// caller's close is the last one, and the read end sees EOF.
func (l *Logind) watch(k *Lock) {
	defer l.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	pid, seen, err := l.handover(ctx, k)
	if err != nil {
		return // closing
	}
	k.closeWrite.Do(func() { k.write.Close() })
	if seen {
		k.pid = pid
		close(k.held)
		l.notify()
	}
	_, err = io.Copy(io.Discard, k.read) // EOF once every write end is closed
	if err != nil {
		return // closing: Close closed the read end
	}
	k.releasedAt = time.Now()
	close(k.released)
	l.notify()
}

// handover waits until the process of k's sender has k's descriptor and
// returns its pid, and whether it was seen there: not when it does not show
// within handoverTimeout (it closed it at once, or died).
func (l *Logind) handover(ctx context.Context, k *Lock) (int, bool, error) {
	var pid uint32
	if err := l.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0, k.Sender).Store(&pid); err != nil {
		if ctx.Err() != nil {
			return 0, false, ctx.Err()
		}
		return 0, false, nil
	}
	// Stat, not Fd: Fd would put the read end in blocking mode, and Close
	// could no longer end watch's read.
	fi, err := k.read.Stat()
	if err != nil {
		return int(pid), false, nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return int(pid), false, nil
	}
	want := fmt.Sprintf("pipe:[%d]", st.Ino)
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(handoverTimeout)
	for {
		entries, err := os.ReadDir(fds)
		if err != nil {
			return int(pid), false, nil // the holder is gone
		}
		for _, e := range entries {
			if int(pid) == os.Getpid() && e.Name() == strconv.Itoa(k.writeFD) {
				continue // logind's own copy, when the caller is this process
			}
			if link, _ := os.Readlink(filepath.Join(fds, e.Name())); link == want && writeEnd(pid, e.Name()) {
				return int(pid), true, nil
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			return int(pid), false, nil
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
	}
}

// writeEnd says whether descriptor fd of process pid is open for writing
// only, as the lock's write end is (the read end, in this process, is the
// same pipe).
func writeEnd(pid uint32, fd string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&syscall.O_ACCMODE == syscall.O_WRONLY
		}
	}
	return false
}

// busConfig is dbus-daemon's configuration: a system bus on sock that lets
// every local user own any name and send and receive anything. Only
// processes that can reach sock (under a test's temporary directory) can
// use it.
func busConfig(sock string) string {
	var path strings.Builder
	_ = xml.EscapeText(&path, []byte("unix:path="+sock))
	return `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>` + path.String() + `</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
`
}
