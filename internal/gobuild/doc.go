// Package gobuild builds this module's programs for the tests that run them
// as real processes (sandboxd for drainkit plan's end-to-end test, the pod
// images of the real-kubelet suite, fakeublkd), all with one set of flags:
// static (CGO_ENABLED=0), -trimpath, no VCS stamp, and whatever GOFLAGS the
// environment adds.
//
// One set of flags is one compile: Go's build cache keys every package by
// its flags, so two tests building with different flags compile the whole
// dependency graph twice, and CI, which compiles these programs ahead
// (.ci/run) with exactly these flags, shares that compile with every test.
// A cold compile of sandboxd's dependencies costs 160 s of CPU on 2 cores.
package gobuild
