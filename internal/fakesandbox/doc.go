// Package fakesandbox is the name the repository's own tests use for the
// fakes of the public package draintest: the fake sandboxes (latency and
// scripted faults per attempt) and the fake node moved there so that users
// can test their wiring with them. Everything here is an alias of
// draintest; new code imports draintest.
package fakesandbox
