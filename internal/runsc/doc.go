// Package runsc drives the real gVisor runsc command line for drainkit's tests and examples.
//
// Tests and examples need real sandboxes that can be checkpointed and restored, and the
// runsc CLI is the only interface gVisor offers for that; this package wraps the handful of
// commands they use (run -detach, checkpoint, restore, kill, wait, state, delete) behind
// context-aware methods, and writes minimal OCI bundles whose root file system is a static
// busybox.
//
// Typical use in a test:
//
//	if err := runsc.Usable(); err != nil {
//		t.Skip(err) // not root, runsc or a static busybox missing
//	}
//	rt := &runsc.Runtime{Root: t.TempDir()}
//	t.Cleanup(func() { rt.DeleteAll(context.Background()) })
//	b, _ := runsc.WriteBundle(filepath.Join(dir, "b1"), runsc.CounterArgs())
//	_ = rt.Run(ctx, "s1", b, filepath.Join(dir, "s1.log"))
//	_ = rt.Checkpoint(ctx, "s1", filepath.Join(dir, "s1.img")) // the sandbox stops
//	_ = rt.Delete(ctx, "s1", false)
//	_ = rt.Restore(ctx, "s1", b, filepath.Join(dir, "s1.img"), filepath.Join(dir, "s1.log"))
//	n, _ := b.Counter() // resumes from where it was, not from 1
//
// Guarantees: every method runs one runsc process bound to its context; when the context
// ends the process is killed and the method returns within [Runtime.WaitDelay] (one second
// by default) even if a child still holds its output. Each runsc runs in a process group
// of its own, so a terminal's Ctrl-C reaches the program that runs it, not runsc halfway
// through a restore. Every Runtime has its own --root
// state directory, so Runtimes in parallel tests never see each other's sandboxes in
// runsc's state; but runsc names a sandbox's control socket (@runsc-sandbox.ID, in its
// network namespace) and its cgroup (/ID at the root of every hierarchy, for a bundle
// with no cgroupsPath, as WriteBundle writes it) by the container ID alone: two Runtimes
// must not run one ID at once (the second's run fails, "address already in use", or, in
// another network namespace, shares the cgroup). runsc removes the cgroup at `runsc
// delete`; [Forget] removes, with a dead namespace's state, the cgroups its containers
// left.
//
// Flags that work on the Debian bookworm package (runsc 0.0~20221219) as root on a
// 2-core VM without /dev/kvm: the default ptrace platform, --network=none, cgroups left on.
// The 2022 release has no systrap platform.
package runsc
