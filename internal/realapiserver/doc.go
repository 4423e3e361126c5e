// Package realapiserver runs a real kube-apiserver (v1.34, built from the
// Go module proxy by .ci/build-kube-apiserver) over Debian's etcd on
// loopback, everything in a test's temporary directory, to prove package
// kube and drain.Config.Pod against the API server they talk to in a
// cluster: the pod's deletionTimestamp and grace after a real
// `delete --grace-period`, the Events a drain posts, listed back, a 403
// from RBAC reported without holding up the drain, and what a pod's own
// token, bound to it (a TokenRequest, as the kubelet's), reads after a
// force deletion: a 401, not a 404, and what it reads with a token of
// another audience: the same 401, before the drain too; and a read over
// HTTP/2 lost with a connection ended after the API server's GOAWAY
// (--goaway-chance, Start's flags; Cluster.StallEtcd holds the read
// unanswered), or gone silent. Cluster.ApplyRBAC applies an example's
// rbac.yaml and Cluster.PublishRootCA does what the controller-manager
// would for a pod's kube-api-access volume, so that internal/realkubelet's
// kubelet runs pods with the token it gets for them.
//
//	cluster := realapiserver.Start(t) // skips (fails under CI=true), naming what is missing
//	cluster.MustDo(t, http.MethodPost, "/api/v1/namespaces/default/pods", pod, http.StatusCreated, nil)
//
// The tests skip when the kube-apiserver binary or etcd is missing, and
// fail under CI=true like every test of a real part. .ci/run installs etcd
// and builds the kube-apiserver after the kubelet, with its flags and build
// cache, and runs these tests after the real-kubelet suite.
package realapiserver
