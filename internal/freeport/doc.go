// Package freeport picks loopback TCP addresses for servers that another
// process will bind: a child process given -listen ADDR, a static pod on the
// host network, a kubelet's health port.
//
// The usual recipe, listen on 127.0.0.1:0, read the port and close, hands
// out a port from the kernel's ephemeral range, which every outgoing
// connection on the machine also draws its local port from. Between the
// close and the child's bind, a connection of any other test (a loopback
// HTTP client, a gRPC dial) can take it, and the child fails with "address
// already in use" (seen in CI: a supervisor's -hook-listen and a stub
// server's -listen, both in one run with dozens of packages testing at once).
// Addr picks below that range, where only listeners that name their port
// live, and checks the port is free by binding it.
package freeport
