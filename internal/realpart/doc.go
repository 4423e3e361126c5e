// Package realpart is how a test says that a real part it needs is missing
// from the machine: root, runsc, a PID namespace, a cgroup hierarchy, FUSE,
// QEMU, a kubelet. Outside CI the test is skipped with the reason; under
// CI=true, where .ci/run has installed every part the tests need, a missing
// part is a fault of the set-up, and the test fails instead of passing by
// skipping.
package realpart
