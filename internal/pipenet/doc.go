// Package pipenet is a listener of in-memory connections (net.Pipe) for tests: a
// server and its clients on it run in a testing/synctest bubble, in virtual time,
// where a loopback socket's reads and writes do not block durably and the bubble's
// clock would not move.
package pipenet
