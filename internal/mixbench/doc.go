// Package mixbench runs one workload ("mix") of sandboxes through Preservers
// side by side — the adaptive default, the adaptive limit started from what
// that Run learned (a later drain on the same node), and a sweep of fixed
// limits — and reports how the adaptive ones compare, as benchmark metrics a
// script can read. The benchmarks of pause (disk, CPU and wait mixes) and
// internal/runsc (real gVisor checkpoints) share it.
//
//	cmp, err := mixbench.Compare(ctx, rounds, 0, makeSandboxes, reset, mixbench.Sweep, pause.Config{})
//	cmp.Report(b, "disk") // x-best-fixed-disk, x-physical-disk, ...
//
// The physical limit of a mix is its bytes over the throughput measured for
// the best fixed limit in hindsight, by Little's law: every preserve moved
// its bytes b in d while k̄ preserves ran on average, so the node moved
// Σ k̄·b / Σ d bytes per second. It leaves out the ramp and the tail of a
// Run, where fewer preserves run than the limit allows.
package mixbench
