// Package gatevia lets drain/draingrpc admit an operation through a
// drain.Gate as a gRPC call, so that the gate's account of the operations
// it refused (the gate phase's Detail in the drain's Report, and its log
// line) says which way in each came by, without an exported name in
// drain. Package drain installs EnterGRPC when it is initialised, as
// package ublk installs ublkhook.Set; a server never uses it.
package gatevia

// EnterGRPC is Gate.Enter of gate, a *drain.Gate, for one operation of
// class (a drain.Class) that came as a gRPC call: a refusal is counted as
// gRPC's. It panics on any other type of gate.
var EnterGRPC func(gate any, class string) (leave func(), err error)
