// Package kube is a pod's own small client of the Kubernetes API server:
// it reads the pod's deletion (metadata.deletionTimestamp and
// deletionGracePeriodSeconds) and posts Kubernetes Events on the pod.
//
// The grace period a server is given can be shorter than its manifest's
// terminationGracePeriodSeconds (kubectl delete --grace-period=30, an
// eviction), and only the API server knows: the pod's deletionTimestamp is
// the absolute time of the kubelet's SIGKILL. Events are how an operator
// sees, in `kubectl describe pod`, what the drain did: the plan at its
// start, the sandboxes lost, the device teardown's verdict, the end.
//
// # Typical wiring
//
// drain.Config.Pod takes a *Pod and does both; by hand:
//
//	pod, err := kube.New(os.Getenv("POD_NAME"), kube.Config{}) // in-cluster; Downward API
//	if err != nil {
//		log.Print("no API access; the manifest's grace stands: ", err)
//	}
//	// In the preStop handler, after budget.OnPreStop:
//	read, cancel := context.WithTimeout(ctx, 2*time.Second)
//	changed, err := pod.Tighten(read, budget) // ErrNotTerminating under node shutdown
//	cancel()
//	pod.Record(kube.Event{Reason: "DrainStarted", Note: "3 sandboxes to preserve"})
//	// Before exiting, a bound of its own (the read's has long passed):
//	flush, cancel := context.WithTimeout(ctx, time.Second)
//	stats := pod.Flush(flush) // posted and dropped events
//	cancel()
//
// The pod's service account needs a Role in its namespace (bound to it by
// a RoleBinding) that allows:
//
//	rules:
//	- apiGroups: [""]
//	  resources: ["pods"]
//	  verbs: ["get"]            # Deletion, Tighten, and the UID events name
//	- apiGroups: ["events.k8s.io"]
//	  resources: ["events"]
//	  verbs: ["create"]         # Record
//
// Without them every request fails with an *APIError whose StatusCode is
// 403 and whose message names the missing rule. A 403 of the API server's
// admission, which no rule changes, says so instead: in a namespace being
// deleted (`kubectl delete namespace`, which ends its pods with their
// grace) no Event is created any more, and a quota may refuse one.
//
// # Guarantees
//
//   - Deletion, DeletionTimestamp and Tighten return by their context's
//     deadline, and send the token only to Config.Host, whose certificate
//     must chain to Config.CAFile (the service account's ca.crt) unless
//     Config.Client is set: no redirect is followed, with Config.Client
//     too. A pod of this name whose UID is not this pod's (Config.UID,
//     else the first read's: this pod force-deleted and a new one created in
//     its name) is ErrPodReplaced, never read as this pod's deletion. A
//     static pod's mirror pod whose kubernetes.io/config.mirror annotation
//     is Config.UID is this pod: the Downward API gives a static pod the
//     kubelet's UID (its config hash), which the mirror carries there under
//     a UID of the API server's (measured under the real kubelet v1.34.4).
//     A pod found through its mirror is a static pod (Identity.Static),
//     which the kubelet stops only when its manifest is removed, with its
//     grace: its Deletion is ErrStaticPod (ErrNotTerminating), never the
//     mirror pod's deletionTimestamp, a 404 after the mirror's force
//     deletion, or a new mirror's: deleting a mirror pod stops nothing.
//     Another static pod's mirror pod in its name (another config hash: its
//     manifest replaced, which no deletion does) is ErrPodReplaced, the
//     error saying so.
//   - Identity says whether a read found the pod under its name with its
//     UID (Confirmed), and keeps the first read that, none confirmed, found
//     another UID under the name or no pod (Mismatch). Read once at start,
//     while the pod runs, a Mismatch is a name or Config.UID that is not
//     this pod's (POD_NAME or POD_UID misconfigured), which drain reports
//     and never takes for a force deletion: read the pod once at start
//     (Spec, as drain.ConfigFromEnv does), before drain.New, to find it
//     before the drain. Not a static pod's 404 before the kubelet made its
//     mirror pod (Identity.MirrorPending: Config.UID its config hash),
//     which a later read confirms through the mirror pod.
//   - A request the API server sheds (429 Too Many Requests: API Priority
//     and Fairness under a mass deletion, an API server shutting down; or a
//     GET's 5xx with a Retry-After) is sent again after its Retry-After
//     (1 s without one; a date, by the API server's clock as the answer's
//     Date shows it), at most 4 times in all, and only when the wait
//     ends before the context's deadline (an event's, Config.EventTimeout);
//     otherwise its *APIError is returned at once. A GET whose answer was
//     lost (sent whole, as the request's httptrace shows, and failed before
//     any byte of its answer came or while its body came; or its connection
//     reset or closed: an API server instance going away behind the
//     Service, a load balancer's reset; on HTTP/2, a connection ended after
//     a GOAWAY that named it taken, or gone silent and given up by the
//     transport's health check) is sent again at once, within the same 4;
//     not one that Config.Client's own timeout ended, nor one the API
//     server refused with a TLS alert (a client certificate refused), nor
//     an event's POST.
//   - Record never blocks: events wait in a queue of Config.EventQueue and
//     are posted one at a time by one goroutine that exists only while there
//     is something to post, each POST bounded by Config.EventTimeout. An
//     event the API server refuses or does not take in time, or that finds
//     the queue full, is dropped with a log line and counted (EventStats,
//     drainkit.kube.events.dropped).
//   - Flush returns by its context's deadline with nothing left running.
//   - The token file is read on every request (the kubelet rotates
//     projected tokens). A read with the pod's own token (the kubelet's
//     projected one, bound to the pod) after the pod was removed (a force
//     deletion) or another pod was created in its name is a 401, not a 404:
//     the API server takes a pod-bound token only while its pod is there
//     with its UID. IsNotFound takes that 401 for the pod's removal, as
//     drain does, when the token is bound to this pod's name (and UID, when
//     known), far from its expiry and of an audience the API server takes
//     (the API server made it for its own, as the kubelet's token says, or
//     an earlier answer took a token of its binding: read the pod at
//     start), unless a read found the pod's deletionTimestamp a minute
//     past (the API server refuses the token then too, while the kubelet
//     may give the pod longer), and a UID not known yet is then the
//     token's (Pod.UID). A token of another audience (a serviceAccountToken
//     volume's) is refused the same bare 401 at every read, and is not
//     taken for the removal. Every 401 says in its error why the token was
//     refused as far as its claims show.
//   - Deletion's Timestamp is in this node's clock, which the kubelet times
//     the grace in: the API server's deletionTimestamp less the offset
//     between the two clocks that the response's Date header proves (a
//     warning is logged from 1 s). Clocks that agree within about a second
//     and the read's round trip are not corrected.
//
// # Why not client-go
//
// Two requests (GET the pod, POST an event) are a few hundred lines of
// net/http with the k8s.io/api types this module already uses for the
// JSON. client-go would add its dependency tree to every user of drainkit
// for them, and its event recorders are built for long-running
// controllers: background broadcaster goroutines, aggregation and spam
// filtering, and retries (tools/record tries an event 12 times, 10 s
// apart) with no deadline the caller sets. At the end of a pod's life the
// need is the opposite: a bounded flush that says what was dropped.
package kube
