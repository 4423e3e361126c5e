package kube

// NewFrom exposes New's environment and service account directory to
// tests.
var NewFrom = newPod
