// Package startsigtest holds a server's start in a test, for a signal while it starts
// (internal/startsig): the server's process calls Hold where its start should wait (a
// test hook its TestMain sets in the server's process), and the test sends its SIGTERM
// with SIGTERMWhileHeld, which fails the test if the signal ends the server.
package startsigtest
