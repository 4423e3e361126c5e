package kube

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// tokenClaims is the part of a service account token's JWT claims that
// says what the token is bound to. The kubelet's projected token (the
// kube-api-access volume every pod mounts) is bound to the pod: its
// kubernetes.io.pod claim names the pod and its UID.
type tokenClaims struct {
	Exp        int64           `json:"exp"`
	Iss        string          `json:"iss"`
	Sub        string          `json:"sub"`
	Aud        json.RawMessage `json:"aud"`
	Kubernetes struct {
		Namespace string `json:"namespace"`
		Pod       *struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
		// WarnAfter is set only in a token the API server made for its
		// own audiences: see ownAudience.
		WarnAfter int64 `json:"warnafter"`
	} `json:"kubernetes.io"`
}

// binding is what a token is, apart from its times: who issued it, for
// whom (its audiences), to which service account and pod. The kubelet's
// rotation writes a new token of the same binding, which the API server
// takes as it took the old one.
func (c tokenClaims) binding() string {
	b, _ := json.Marshal([]any{c.Iss, c.Aud, c.Sub, c.Kubernetes.Namespace, c.Kubernetes.Pod})
	return string(b)
}

// ownAudience reports whether the API server said, in the token itself,
// that it made it for its own audiences: it writes kubernetes.io's
// warnafter only into a pod-bound token of 3607 s (the kubelet's
// kube-api-access volume) whose audiences are all its own, which it then
// makes last a year (the TokenRequest's isKubeAudiences, k8s.io/kubernetes
// pkg/registry/core/serviceaccount/storage/token.go; measured on the real
// kube-apiserver v1.34.4: the kubelet's token has it, one for the audience
// "vault" or of 3600 s has not). Not with
// --service-account-extend-token-expiration=false.
func (c tokenClaims) ownAudience() bool { return c.Kubernetes.WarnAfter != 0 }

// parseClaims reads the claims of token, a JWT, without checking its
// signature: they only explain an answer of the API server, which did.
func parseClaims(token string) (tokenClaims, bool) {
	var c tokenClaims
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return c, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil || json.Unmarshal(payload, &c) != nil {
		return c, false
	}
	return c, true
}

// deletedLeeway is how long past a pod's deletionTimestamp the API server
// still takes a token bound to it (jwt.DefaultLeeway in its validator),
// and deletedMargin how much sooner than that a refusal is taken for it:
// the clocks' offset is known to about a second.
const (
	deletedLeeway = time.Minute
	deletedMargin = 5 * time.Second
)

// expiryMargin is how long before its exp, in the API server's clock as
// the answer's Date shows it, a token's refusal may be its expiry: the API
// server takes a token up to a minute past its exp (its JWT leeway), and
// the Date header is whole seconds.
const expiryMargin = 2 * time.Minute

// accepted records that the API server took token (it answered the
// request as its user), so that a later 401 to a token of its binding is
// not its audience's (refused).
func (p *Pod) accepted(token string) {
	c, ok := parseClaims(token)
	if !ok || c.Kubernetes.Pod == nil {
		return
	}
	p.mu.Lock()
	p.took = c.binding()
	p.mu.Unlock()
}

// refused says why the API server answered 401 Unauthorized to token, as
// far as its claims show, at now (this node's clock) with the API server's
// clock offset ahead of it, and whether that answer is the pod's removal:
// gone when the token is bound to this pod (its name, and its UID when it
// is known), far from its expiry, of an audience the API server takes, and
// no read found the pod's deletionTimestamp a minute past (the API
// server's clock). Gone, an unknown UID is learned from the token (UID).
//
// The API server takes a pod-bound token only while the pod it names is
// there with that UID and not a minute past its deletionTimestamp
// (k8s.io/kubernetes pkg/serviceaccount's validator), and answers a bare
// 401 otherwise: after a force deletion (the pod removed) or once another
// pod has its name (deleted and created again), every read with this pod's
// own token is a 401, never the 404 or the other UID that says so
// (measured on the real kube-apiserver v1.34.4, once its 10 s cache of the
// token's last success has passed).
//
// The API server answers the same bare 401 ("Unauthorized", no details) to
// a token of an audience it does not take, on every read, before the drain
// too: a serviceAccountToken volume whose audience is another service's
// (measured on the real kube-apiserver v1.34.4; only a TokenReview, which
// the pod cannot make with a token refused, tells "token audiences
// [\"vault\"] is invalid for the target audiences" from "service account
// token has been invalidated"). So a 401 is the pod's removal only for a
// token whose audience the API server is known to take: one of its
// binding was taken by an earlier read or Event of this Pod (the read at
// start, drain.ConfigFromEnv's and the examples'), or the API server made
// it for its own audiences (ownAudience, the kubelet's token).
//
// The kubelet may give a pod more than a minute past its deletionTimestamp:
// a second, shorter deletion moves the timestamp but not the kubelet's
// grace, a kubelet restarted gives the grace again from its own start, and
// one that learns of the deletion late (after a partition) gives it from
// then. So a 401 once a read found the deletionTimestamp a minute past is
// not taken for the removal. One that no read can tell so (the kubelet's
// first termination starting a minute past the deletionTimestamp, its
// first read the 401) is: nothing the API server returns tells it from a
// force deletion (measured on the real kube-apiserver v1.34.4: the same
// bare 401 to a token of a pod still there a minute past its
// deletionTimestamp and to one of a pod removed, and the same TokenReview
// error, "service account token has been invalidated"; an anonymous read
// is a 403 that says nothing of the pod). Nor from a service account
// deleted while its pods run (the validator's first check): `kubectl
// delete -f` of a manifest holding it and the DaemonSet, whose pods the
// garbage collector deletes with their grace (a namespace's deletion,
// ordered since v1.33, deletes the service account only once its pods are
// gone). Measured: a read 2 s after the service account's deletion, the
// pod deleted with 30 s and still there, is the same bare 401, its
// TokenReview `serviceaccounts "sandboxd" not found`.
func (p *Pod) refused(token string, now time.Time, offset time.Duration) (why string, gone bool) {
	c, ok := parseClaims(token)
	if !ok {
		return "the token in " + p.token + " was refused: not a token this API server takes", false
	}
	exp := time.Unix(c.Exp, 0)
	if c.Exp != 0 && exp.Sub(now.Add(offset)) < expiryMargin {
		return fmt.Sprintf("the token in %s was refused: it expires at %s (the kubelet rewrites a projected token long before)",
			p.token, exp.UTC().Format(time.RFC3339)), false
	}
	bound := c.Kubernetes.Pod
	if bound == nil {
		return "the token in " + p.token + " was refused: a token bound to no pod, whose service account or Secret may be gone", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	uid := p.uid
	if bound.Name != p.name || c.Kubernetes.Namespace != p.ns || uid != "" && bound.UID != uid {
		return fmt.Sprintf("the token in %s was refused: it is bound to the pod %s/%s (UID %s), not this pod %s/%s (UID %q)",
			p.token, c.Kubernetes.Namespace, bound.Name, bound.UID, p.ns, p.name, uid), false
	}
	if !p.deleted.IsZero() && now.Add(offset).After(p.deleted.Add(deletedLeeway-deletedMargin)) {
		return fmt.Sprintf("the pod's own service account token, bound to its UID %s, was refused: the pod's deletionTimestamp %s is a minute past, "+
			"and the API server takes no token of a pod that long deleted, though the kubelet may still give it time (it keeps the grace of the "+
			"deletion it started with, and a kubelet restarted gives the grace again)", bound.UID, p.deleted.UTC().Format(time.RFC3339)), false
	}
	if !c.ownAudience() && p.took != c.binding() {
		return fmt.Sprintf("the token in %s, bound to this pod, was refused, and the API server has not taken a token of its audience %s "+
			"from this process: a token of an audience it does not take (a serviceAccountToken volume's) is refused the same as the token of "+
			"a pod removed, so this is not taken for the pod's removal", p.token, c.Aud), false
	}
	if uid == "" {
		// The kubelet bound the token to this pod: its UID is the pod's,
		// which no read could learn now, and tells this removal from a
		// name the API server never had (drain's force deletion).
		p.uid = bound.UID
	}
	return fmt.Sprintf("the pod's own service account token, bound to its UID %s, was refused: the API server no longer has this pod: "+
		"a force deletion removed it, another pod was created in its name, or its deletionTimestamp is a minute past "+
		"(a service account deleted while the pod runs, as `kubectl delete -f` of a manifest holding it and the pod's DaemonSet does, "+
		"is refused the same)", bound.UID), true
}
