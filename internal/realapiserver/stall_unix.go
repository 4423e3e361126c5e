//go:build unix

package realapiserver

import (
	"os"
	"sync"
	"syscall"
	"testing"
)

// Stall stops the kube-apiserver (SIGSTOP) until the returned resume is
// called, or the test ends: an API server that does not answer, as an
// overloaded or partitioned one. The kernel still takes connections, and
// every request waits, its TLS handshake first.
func (c *Cluster) Stall(t *testing.T) (resume func()) {
	t.Helper()
	return stall(t, c.server)
}

// StallEtcd stops etcd (SIGSTOP) until the returned resume is called, or
// the test ends: the API server answers what it has in memory (/version,
// authentication by its token file, RBAC from its informers) and holds
// every request that reads etcd, a GET of a pod first among them.
func (c *Cluster) StallEtcd(t *testing.T) (resume func()) {
	t.Helper()
	return stall(t, c.etcd)
}

// stall stops p (SIGSTOP) until the returned resume is called, or the
// test ends.
func stall(t *testing.T, p *os.Process) (resume func()) {
	t.Helper()
	must(t, p.Signal(syscall.SIGSTOP))
	var once sync.Once
	resume = func() { once.Do(func() { must(t, p.Signal(syscall.SIGCONT)) }) }
	t.Cleanup(resume)
	return resume
}

// continueStalled continues p, stopped by a Stall.
func continueStalled(p *os.Process) { _ = p.Signal(syscall.SIGCONT) }
