// Command naiveserver runs the naive sandbox server of
// examples/supervisor/internal/naiveserver as a program of its own, for the
// real-kubelet tests (internal/realkubelet), which pack it into an image
// behind the supervisor.
package main
