// Package servingtest checks, in a test, what an example server did when its serving
// stopped on its own (its listener's Accept failing for good, the test having closed it
// under the server): as drain.Server.Run does, it logged that at Error when it stopped,
// drained at once, as at SIGTERM, with its budget counted from then, and returned an error
// that makes its Main exit 1.
package servingtest
