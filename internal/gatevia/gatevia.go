package gatevia

import "time"

// EnterGRPC is Gate.Enter of gate, a *drain.Gate, for one operation of
// class (a drain.Class) that came as a gRPC call: a refusal is counted as
// gRPC's. It panics on any other type of gate. Package drain sets it when
// it is initialised; until then (in a program that does not link drain) it
// panics saying so.
var EnterGRPC func(gate any, class string) (leave func(), err error) = notInstalled

// notInstalled is EnterGRPC in a program that does not link drain: a call
// is a bug of its caller, which a nil function's call would report as a
// nil pointer dereference naming neither package.
func notInstalled(any, string) (func(), error) {
	panic("gatevia: EnterGRPC in a program without package drain, which installs it when it is initialised: " +
		"drain/draingrpc imports drain; a program that imports gatevia alone has no gate to enter")
}

// RetryAfter is how long a refusal of gate, a *drain.Gate, asks its client
// to wait before it retries: the gate's RetryAfter, or the default its HTTP
// middleware's Retry-After has when that is zero, so that a gRPC refusal
// and an HTTP one ask for the same wait. It panics on any other type of
// gate, and, like EnterGRPC, in a program that does not link drain.
var RetryAfter func(gate any) time.Duration = retryNotInstalled

// retryNotInstalled is RetryAfter in a program that does not link drain.
func retryNotInstalled(any) time.Duration {
	panic("gatevia: RetryAfter in a program without package drain, which installs it when it is initialised: " +
		"drain/draingrpc imports drain; a program that imports gatevia alone has no gate to ask")
}
