package drain

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A file a handler admitted through the gate serves with http.ServeFile
// (http.FileServer, ServeContent: io.CopyN, whose *io.LimitedReader over
// the file net/http hands its connection's ReadFrom) goes by sendfile, as
// without the gate. Fault: row 2181's writer cut it into pieces with a
// LimitReader around the LimitedReader, and net's sendfile, which looks
// one LimitedReader deep for the file, found none: every byte of a
// sandbox's image download was copied through user space. On loopback,
// a 1 MiB image, whole and a range of it; the server's connections count
// the bytes their ReadFrom took, by sendfile's reader or not.
func TestAFileServedThroughTheGateGoesBySendfile(t *testing.T) {
	image := filepath.Join(t.TempDir(), "image")
	content := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	require.NoError(t, os.WriteFile(image, content, 0o600))
	g := &Gate{Exempt: []Class{Checkpoint}}
	srv := &http.Server{Handler: g.Admit(Checkpoint, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, image)
	}))}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := &readFromListener{Listener: tcp}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + tcp.Addr().String() + "/sandboxes/sb-0/image"

	resp, err := http.Get(url)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.True(t, bytes.Equal(content, got), "the image, whole: %d of %d bytes", len(got), len(content))

	from, to := 100_000, 900_000
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", from, to-1))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	got, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.True(t, bytes.Equal(content[from:to], got), "the range: %d of %d bytes", len(got), to-from)

	t.Logf("the connections' ReadFrom took %d bytes by sendfile's reader, %d copied", ln.bySendfile.Load(), ln.copied.Load())
	assert.Zero(t, ln.copied.Load(), "bytes copied through user space")
	assert.Greater(t, ln.bySendfile.Load(), int64(len(content)), "the image and the range, but what net/http sniffs, by sendfile")
}

// readFromListener's connections count the bytes their ReadFrom takes
// (net/http's response.ReadFrom calls it) from a reader net's sendfile
// reads, and from any other, which net copies through user space.
type readFromListener struct {
	net.Listener
	bySendfile, copied atomic.Int64
}

func (l *readFromListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return readFromConn{c.(*net.TCPConn), l}, nil
}

type readFromConn struct {
	*net.TCPConn
	l *readFromListener
}

func (c readFromConn) ReadFrom(r io.Reader) (int64, error) {
	bySendfile := sendfileReads(r)
	n, err := c.TCPConn.ReadFrom(r)
	if bySendfile {
		c.l.bySendfile.Add(n)
	} else {
		c.l.copied.Add(n)
	}
	return n, err
}

// sendfileReads reports whether net's sendfile reads r: a file (a
// syscall.Conn), or an *io.LimitedReader over one, one deep.
func sendfileReads(r io.Reader) bool {
	if lr, ok := r.(*io.LimitedReader); ok {
		r = lr.R
	}
	_, ok := r.(syscall.Conn)
	return ok
}
