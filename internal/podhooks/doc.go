// Package podhooks lets drain read the preStop hooks of the pod's
// containers from the spec package kube read (a kube.Spec) without an
// exported name in kube: drain.NewServer says at start what the
// container's preStop hook will do to the drain (an httpGet to an address
// the hook is not served on, an exec hook that never calls it). Package
// kube installs Of when it is initialised, as deadline installs
// prestopsleep.Of; a server never uses it.
//
//	pod := podhooks.Of(spec) // spec: a kube.Spec
//	for _, c := range pod.Containers {
//		if h := c.PreStop; h != nil && h.HTTPGet != nil { ... }
//	}
//
// A spec of any other type than kube.Spec panics, naming the type; a
// program that does not link kube panics saying so.
package podhooks
