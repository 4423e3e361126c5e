// Package kubeletconf reads from a node's KubeletConfiguration (the file
// of the kubelet's --config) the grace the kubelet gives a pod when it
// terminates it on its own, with no deletion to say so: graceful node
// shutdown's slice for the pod's priority, and a soft node-pressure
// eviction's evictionMaxPodGracePeriod. They are computed as the kubelet
// v1.34 computes them (pkg/kubelet/nodeshutdown, pkg/kubelet/eviction), so
// that drainkit plan can plan that termination from the node's own
// configuration and say when a server's -kubelet-grace is not it.
//
//	c, err := kubeletconf.Read("/var/lib/kubelet/config.yaml")
//	if err != nil {
//		return err // names the file and what is wrong
//	}
//	if g, ok := c.ShutdownGrace(0); ok { // a pod without a priority
//		fmt.Println("a node shutdown gives it", g)
//	}
package kubeletconf
