package wrappedtransport

import (
	"net/http"
	"sync/atomic"
)

// Counting is a program's wrapper of a RoundTripper: it counts the
// requests it passes on to Next.
type Counting struct {
	Next     http.RoundTripper
	requests atomic.Int64
}

// RoundTrip counts r and passes it on to Next.
func (c *Counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	return c.Next.RoundTrip(r)
}

// Requests is how many requests c has passed on.
func (c *Counting) Requests() int64 { return c.requests.Load() }

// Install puts a Counting wrapper of http.DefaultTransport in its place,
// as a program that wraps it does, and puts the transport back at t's
// cleanup (t is a test's *testing.T). Not for parallel tests:
// http.DefaultTransport is the process's.
func Install(t interface{ Cleanup(func()) }) *Counting {
	c := &Counting{Next: http.DefaultTransport}
	http.DefaultTransport = c
	t.Cleanup(func() { http.DefaultTransport = c.Next })
	return c
}
