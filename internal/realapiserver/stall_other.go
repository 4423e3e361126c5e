//go:build !unix

package realapiserver

import (
	"os"
	"testing"
)

// Stall skips the test: no signal stops a process outside Unix (SIGSTOP).
func (c *Cluster) Stall(t *testing.T) (resume func()) {
	t.Skip("realapiserver: no SIGSTOP to stall the kube-apiserver with outside Unix")
	return func() {}
}

// StallEtcd skips the test: no signal stops a process outside Unix (SIGSTOP).
func (c *Cluster) StallEtcd(t *testing.T) (resume func()) {
	t.Skip("realapiserver: no SIGSTOP to stall etcd with outside Unix")
	return func() {}
}

// continueStalled does nothing: no process is stopped outside Unix.
func continueStalled(*os.Process) {}
