package podhooks

import "fmt"

// Pod is what a pod's spec says of its containers' preStop hooks.
type Pod struct {
	// HostNetwork is spec.hostNetwork: the pod has the node's network, so
	// the kubelet's httpGet reaches its loopback and the node's addresses.
	HostNetwork bool
	Containers  []Container
}

// Container is one of spec.containers, or a native sidecar (one of
// spec.initContainers with restartPolicy Always), whose preStop the
// kubelet runs too.
type Container struct {
	Name string
	// Ports are the container's named ports (ports[].name to
	// containerPort), which an httpGet's port may name.
	Ports map[string]int
	// PreStop is lifecycle.preStop; nil for none.
	PreStop *Handler
	// PostStart is lifecycle.postStart; nil for none. One that calls the
	// drain starts it as the container starts.
	PostStart *Handler
}

// Handler is a lifecycle handler: one of Exec, HTTPGet and Sleep is set,
// none for a handler of a kind this package does not know.
type Handler struct {
	// Exec is exec.command.
	Exec []string
	// HTTPGet is httpGet.
	HTTPGet *HTTPGet
	// Sleep is sleep.seconds; nil for no sleep.
	Sleep *int64
}

// HTTPGet is an httpGet handler as the spec has it.
type HTTPGet struct {
	Host, Path, Scheme string
	// Port is the port as written: a number, or the name of one of the
	// container's ports.
	Port    string
	Headers []Header
}

// Header is one of an httpGet's httpHeaders.
type Header struct{ Name, Value string }

// Of returns what spec (a kube.Spec) says of its containers' preStop hooks.
var Of = func(spec any) Pod {
	panic(fmt.Sprintf("podhooks: no kube package in this program to read %T's hooks", spec))
}
