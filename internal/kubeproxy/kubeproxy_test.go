package kubeproxy

import (
	"bufio"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoNode answers every line with its name; the returned func closes it.
func echoNode(t *testing.T, name string) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := c.Write([]byte(name + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() { ln.Close(); <-done }
}

// An open connection stays with its node when the node turns not ready; a
// new one goes to the next node that is; with none ready, it is closed.
func TestAConnectionStaysWithItsNodeAndANewOneGoesToAReadyOne(t *testing.T) {
	a, closeA := echoNode(t, "A")
	defer closeA()
	b, closeB := echoNode(t, "B")
	defer closeB()
	var aReady, bReady atomic.Bool
	aReady.Store(true)
	bReady.Store(true)
	svc := Start(t, Endpoint{Addr: a, Ready: aReady.Load}, Endpoint{Addr: b, Ready: bReady.Load})

	ask := func(c net.Conn) (string, error) {
		if _, err := c.Write([]byte("who\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	kept, err := net.Dial("tcp", svc)
	require.NoError(t, err)
	defer kept.Close()
	got, err := ask(kept)
	require.NoError(t, err)
	assert.Equal(t, "A\n", got)

	aReady.Store(false)
	got, err = ask(kept)
	require.NoError(t, err)
	assert.Equal(t, "A\n", got, "an open connection stays with its node")
	moved, err := net.Dial("tcp", svc)
	require.NoError(t, err)
	defer moved.Close()
	got, err = ask(moved)
	require.NoError(t, err)
	assert.Equal(t, "B\n", got, "a new connection goes to a ready node")

	bReady.Store(false)
	none, err := net.Dial("tcp", svc)
	require.NoError(t, err)
	defer none.Close()
	_, err = ask(none)
	assert.Error(t, err, "no endpoint: the connection is closed")
}
