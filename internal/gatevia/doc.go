// Package gatevia lets drain/draingrpc admit an operation through a
// drain.Gate as a gRPC call, so that the gate's account of the operations
// it refused (the gate phase's Detail in the drain's Report, and its log
// line) says which way in each came by, without an exported name in
// drain. Package drain installs EnterGRPC, and RetryAfter (the wait a
// refusal asks, which the interceptors send as gRPC's retry hints), when
// it is initialised, as package ublk installs ublkhook.Set; a server never
// uses it.
//
// draingrpc's interceptors enter the gate through it:
//
//	leave, err := gatevia.EnterGRPC(g, string(c))
//	if err != nil {
//		wait := retryWait(gatevia.RetryAfter(g)) // the trailer grpc-retry-pushback-ms, and a RetryInfo
//		setTrailer(metadata.Pairs(pushbackKey, strconv.FormatInt(wait.Milliseconds(), 10)))
//		return nil, refusal(method, wait) // codes.Unavailable
//	}
//	return leave, nil
//
// Guarantees: in a program that links drain (draingrpc imports it, so
// every program with its interceptors does), EnterGRPC is the gate's Enter
// for the class, with Enter's whole contract (the leave function, once
// however often called; an error wrapping drain.ErrDraining for a gated
// class once the gate is closed; exempt classes admitted), but a refusal
// is counted as gRPC's ("grpc"), not the server's own ("enter"). A gate of
// any other type than *drain.Gate panics, naming the type; a program that
// does not link drain has no gate to enter, and EnterGRPC panics saying
// so. RetryAfter is the gate's RetryAfter, or 5 s (its HTTP middleware's
// default) when that is zero, and panics as EnterGRPC does.
package gatevia
