package kube

// NewFrom exposes New's environment and service account directory to
// tests.
var NewFrom = newPod

// ClockOffset exposes the reading of a response's Date header to tests.
var ClockOffset = clockOffset
