package keepaliveclose

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The first request of a connection is handed on and answered; the one
// after the answer closes the connection unread, and is counted.
func TestARequestAfterAnAnswerClosesTheConnectionUnread(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := Wrap(inner)
	defer ln.Close()
	read := make(chan string, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				read <- "closed: " + err.Error()
				return
			}
			read <- req.URL.Path
			_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		}
	}()
	c, err := net.Dial("tcp", inner.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	br := bufio.NewReader(c)

	_, err = io.WriteString(c, "POST /first HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	assert.Equal(t, "/first", <-read)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)

	_, err = io.WriteString(c, "POST /second HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	assert.Contains(t, <-read, "closed: ", "the second request is not handed on")
	_, err = br.ReadByte()
	assert.Error(t, err, "no answer: the connection closed")
	assert.EqualValues(t, 1, ln.Dropped())
	assert.Equal(t, 1, ln.DroppedMethod(http.MethodPost))
	assert.Zero(t, ln.DroppedMethod(http.MethodGet))
	<-done
}
