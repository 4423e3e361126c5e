// Command podbin is the small programs the real-kubelet tests run in their
// pods, one per first argument:
//
//	podbin [pause]
//	    the pod sandbox's process (the image's entrypoint, so no argument
//	    means pause): sleeps, reaps, exits on SIGTERM or SIGINT
//	podbin probe -listen ADDR -events FILE [-hook return|hang|DURATION] [-term exit|ignore]
//	    records, one line "EVENT UNIXNANO" each, when it is ready (ADDR
//	    accepts connections: the hook can no longer be refused), when the
//	    preStop GET /hook arrives and when SIGTERM does; the hook answers at
//	    once, after DURATION, or never (recording when its caller closed
//	    the connection: a restarted kubelet); SIGTERM ends it or is ignored
//	podbin server -report FILE [-listen ADDR] [-sandboxes N] [-pause DURATION]
//	    a server wired with drain.NewServer, as the README's "Wire it",
//	    configured by the DRAINKIT_* environment of its manifest, with N
//	    fake sandboxes whose preserve takes DURATION; writes the drain's
//	    Report to FILE and exits with Server.Run's status (no Report after
//	    a Run that returned 2: nothing served, nothing drained)
//	podbin ublkd CONFIG_JSON
//	    a fake ublk device daemon (internal/fakeublk), for the supervisor
package main
