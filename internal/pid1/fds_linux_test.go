package pid1

import (
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
)

// A container's command gets the descriptors its runtime passes above stdio (runc's
// --preserve-fds, systemd's socket activation: LISTEN_FDS from fd 3), and an init in
// front of it (tini, dumb-init) passes them on at their numbers. The init started its
// child with stdio and its ready pipe alone, the pipe at fd 3: the program's fd 3 was
// the init's pipe, closed by Ready, and what it wrote there never reached the reader.
func TestDescriptorsGivenToPID1ReachTheProgram(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "a new PID namespace needs root (run the tests as root)")
	}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), programEnv+"=fd3")
	cmd.ExtraFiles = []*os.File{w}
	p := startWith(t, cmd, pid1test.StartPID1)
	require.NoError(t, w.Close()) // PID 1 holds its own, and passes it on

	p.waitLine(t, "wrote fd 3: <nil>")
	code, _ := p.wait(t)
	assert.Zero(t, code)
	got, err := io.ReadAll(r) // to EOF: every holder of the write end has exited
	require.NoError(t, err)
	assert.Equal(t, "fd 3 reached the program\n", string(got))
}

// A server drains by closing its listening socket: a client connecting after that is
// refused at once (ECONNREFUSED), and a load balancer sends it elsewhere. The init
// kept its own copy of every descriptor it passed on, so the socket went on listening
// while the server ran: the kernel completed the client's handshake into a queue
// nobody would accept from, and the client hung there until its own timeout.
func TestASocketTheProgramWasGivenStopsListeningWhenTheProgramClosesIt(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "a new PID namespace needs root (run the tests as root)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f, err := ln.(*net.TCPListener).File()
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), programEnv+"=unlisten3")
	cmd.ExtraFiles = []*os.File{f}
	p := startWith(t, cmd, pid1test.StartPID1)
	require.NoError(t, f.Close()) // PID 1 holds its own, and passes it on
	require.NoError(t, ln.Close())

	p.waitLine(t, "closed fd 3: <nil>")
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err == nil {
		_ = conn.Close()
	}
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "a connection once the program closed its listening socket")
}
