package realapiserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/realapiserver"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ns = "default"

// The Role the example's manifest gives sandboxd, applied as is (only its
// namespace and subject changed) so that the test proves it is enough.
const rbacManifest = "../../examples/sandboxd/deploy/rbac.yaml"

func grantTheExamplesRole(t *testing.T, c *realapiserver.Cluster) {
	t.Helper()
	role := c.ApplyRBAC(t, rbacManifest, ns)
	// The static token's user stands in for the service account too.
	c.MustDo(t, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings", &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: "sandboxd-drainkit-user", Namespace: ns},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: realapiserver.PodUser}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
	}, http.StatusCreated, nil)
}

// serviceAccount is the service account the example's manifest gives
// sandboxd (rbacManifest), which createPod's pods run as.
const serviceAccount = "sandboxd"

// boundToken returns a token of serviceAccount bound to pod, as the
// kubelet's projected kube-api-access volume holds one (a TokenRequest
// with the pod as its bound object, an hour asked: the API server makes
// it a year, as in a cluster), or, with audiences aud, as a
// serviceAccountToken volume of those audiences holds one (none: the API
// server's). Each call is a new token, as the kubelet's rotation writes
// one.
func boundToken(t *testing.T, c *realapiserver.Cluster, pod *corev1.Pod, aud ...string) string {
	t.Helper()
	var tr authenticationv1.TokenRequest
	c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+ns+"/serviceaccounts/"+serviceAccount+"/token", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3607)), Audiences: aud,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, http.StatusCreated, &tr)
	return tr.Status.Token
}

// tokenReview is the API server's TokenReview of token, made as the
// admin: why it refuses it (Status.Error), empty when it takes it.
func tokenReview(t *testing.T, c *realapiserver.Cluster, token string) string {
	t.Helper()
	var tr authenticationv1.TokenReview
	c.MustDo(t, http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews",
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, http.StatusCreated, &tr)
	return tr.Status.Error
}

// writeToken writes token to path, as the kubelet writes a projected
// token, and returns path.
func writeToken(t *testing.T, path, token string) string {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(token), 0o600))
	return path
}

// createPod creates a pod bound to a node that does not exist: no kubelet
// ever confirms its deletion, so once deleted it stays, with its
// deletionTimestamp, as a terminating pod's object does while its
// containers drain.
func createPod(t *testing.T, c *realapiserver.Cluster, name string) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+ns+"/pods", &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      "node-that-does-not-exist",
			ServiceAccountName:            serviceAccount,
			TerminationGracePeriodSeconds: new(int64(3600)),
			Containers:                    []corev1.Container{{Name: "sandboxd", Image: "sandboxd"}},
		},
	}, http.StatusCreated, &pod)
	return &pod
}

// deletePod is `kubectl delete pod NAME --grace-period=N`: the DELETE
// with DeleteOptions.gracePeriodSeconds. It returns when the request was
// sent and when its answer came.
func deletePod(t *testing.T, c *realapiserver.Cluster, name string, grace int64) (sent, answered time.Time) {
	t.Helper()
	sent = time.Now()
	c.MustDo(t, http.MethodDelete, "/api/v1/namespaces/"+ns+"/pods/"+name,
		&metav1.DeleteOptions{GracePeriodSeconds: &grace}, http.StatusOK, nil)
	return sent, time.Now()
}

func podConfig(t *testing.T, c *realapiserver.Cluster, token string) kube.Config {
	return kube.Config{Host: c.URL, Namespace: ns, TokenFile: c.TokenFile(t, token), CAFile: c.CAFile}
}

func TestRealAPIServer(t *testing.T) {
	// An HTTP/2 client gets a GOAWAY with one answer in 50, as from an
	// instance of an HA API server behind a load balancer (the flag's
	// most); the admin's and kube's own clients speak HTTP/1.
	c := realapiserver.Start(t, "--goaway-chance=0.02")
	// The ServiceAccount admission plugin wants the namespace's default
	// service account, which a controller-manager would create.
	c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+ns+"/serviceaccounts",
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, http.StatusCreated, nil)
	grantTheExamplesRole(t, c)

	t.Run("PodReaderReadsTheDeletionOfDeleteGracePeriod", func(t *testing.T) {
		createPod(t, c, "reader-0")
		pod, err := kube.New("reader-0", podConfig(t, c, realapiserver.PodToken))
		require.NoError(t, err)
		_, err = pod.Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrNotTerminating, "before the delete")
		g, err := pod.Grace(t.Context())
		require.NoError(t, err)
		assert.Equal(t, time.Hour, g, "the spec's terminationGracePeriodSeconds")

		sent, answered := deletePod(t, c, "reader-0", 30)
		d, err := pod.Deletion(t.Context())
		require.NoError(t, err)
		assert.Equal(t, 30*time.Second, d.Grace)
		// The API server sets deletion time + 30 s, stored to the second.
		assert.WithinRange(t, d.Timestamp, sent.Add(30*time.Second).Truncate(time.Second), answered.Add(30*time.Second))
		t.Logf("DELETE sent %s, answered %s; deletionTimestamp %s, grace %v",
			sent.Format(time.RFC3339Nano), answered.Format(time.RFC3339Nano), d.Timestamp.Format(time.RFC3339Nano), d.Grace)

		// The manifest's hour is cut to the deletion's 30 s.
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		b.OnPreStop(answered)
		changed, err := pod.Tighten(t.Context(), b)
		require.NoError(t, err)
		assert.True(t, changed)
		assert.True(t, b.Kill().Equal(d.Timestamp), "SIGKILL %v, want %v", b.Kill(), d.Timestamp)
	})

	// docs/faults.md row 228: a second, shorter deletion keeps the first
	// one's time (k8s.io/apiserver's rest.BeforeDelete), so the
	// deletionTimestamp is not when the kubelet, which runs the
	// termination over from the new deletion, kills; the drain follows the
	// hook's new run instead.
	t.Run("ShorterDeletionKeepsTheFirstOnesTime", func(t *testing.T) {
		createPod(t, c, "again-0")
		pod, err := kube.New("again-0", podConfig(t, c, realapiserver.PodToken))
		require.NoError(t, err)
		deletePod(t, c, "again-0", 3600)
		d1, err := pod.Deletion(t.Context())
		require.NoError(t, err)
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		d, err := drain.New(drain.Config{Budget: b, Sandboxes: draintest.NewNode(), Pod: pod})
		require.NoError(t, err)
		call := func(start time.Time) {
			d.PreStop().ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(t.Context(), http.MethodGet,
				"/drain?wait=0s&start="+url.QueryEscape(start.Format(time.RFC3339Nano)), nil))
		}
		call(time.Now())

		rerun, _ := deletePod(t, c, "again-0", 900)
		d2, err := pod.Deletion(t.Context())
		require.NoError(t, err)
		assert.Equal(t, 900*time.Second, d2.Grace)
		assert.True(t, d2.Timestamp.Equal(d1.Timestamp.Add(-2700*time.Second)), "the first deletion's time + 900 s: %v, first %v",
			d2.Timestamp, d1.Timestamp)
		call(rerun) // the kubelet runs the hook again
		want := rerun.Add(900 * time.Second).Round(0)
		timeout := time.After(10 * time.Second) // a hang guard, not a timing assertion
		for !b.Kill().Equal(want) {
			select {
			case <-b.Changed():
			case <-timeout:
				require.Fail(t, "the re-run's read did not move SIGKILL to the new run's", "SIGKILL %v, want %v", b.Kill(), want)
			}
		}
		assert.True(t, b.Kill().After(d2.Timestamp), "later than the deletionTimestamp")
		rep := d.Shutdown(t.Context())
		require.NoError(t, rep.Err())
	})

	// docs/faults.md row 2740: a force deletion (gracePeriodSeconds 0) of a
	// pod that a finalizer keeps in the API server leaves it there with
	// deletionGracePeriodSeconds 0, which the kubelet runs with its 1 s
	// ("no matter what, we always supply a grace period of 1"), and, after
	// a deletion of 30 s, as the shorter second deletion it is: the kubelet
	// keeps the grace its termination started with (row 228). The read took
	// the 0 for no grace, and the drain put SIGKILL at the deletionTimestamp
	// (the first deletion's time), so the floor 2 s after SIGTERM.
	//
	//	delete 30 s ── preStop (T0) ── read: SIGKILL T0+30 s
	//	delete --force, grace 0 (the finalizer keeps the pod)
	//	SIGTERM ── read: grace 0 → the budget stands at T0+30 s
	t.Run("ForceDeletionOfAPodAFinalizerKeepsIsTheKubeletsOneSecond", func(t *testing.T) {
		const name = "held-0"
		c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+ns+"/pods", &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{"drainkit.test/held"}},
			Spec: corev1.PodSpec{NodeName: "node-that-does-not-exist", ServiceAccountName: serviceAccount,
				TerminationGracePeriodSeconds: new(int64(3600)), Containers: []corev1.Container{{Name: "sandboxd", Image: "sandboxd"}}},
		}, http.StatusCreated, nil)
		pod, err := kube.New(name, podConfig(t, c, realapiserver.PodToken))
		require.NoError(t, err)
		_, err = pod.Spec(t.Context()) // at start: the pod's UID known
		require.NoError(t, err)

		first, _ := deletePod(t, c, name, 30)
		var logs logbuf.Buffer
		atSIGTERM := logbuf.NewSignal("at=SIGTERM")
		b, err := deadline.New(3600*time.Second, deadline.Config{Margin: time.Second})
		require.NoError(t, err)
		node := draintest.NewNode()
		node.AddN("sb", 2, time.Millisecond)
		d, err := drain.New(drain.Config{Budget: b, Sandboxes: node, Pod: pod,
			Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, atSIGTERM), nil)),
			Steps: []drain.Step{drain.NewStep(deadline.Phase{Name: "after-the-read", Reserve: deadline.Fixed(time.Second)},
				func(context.Context) (any, error) {
					select { // the read at SIGTERM answers before the Report
					case <-atSIGTERM.Seen():
					case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
					}
					return nil, nil
				})},
		})
		require.NoError(t, err)
		next := b.Changed()
		d.PreStop().ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/drain?wait=0s", nil))
		for b.Kill().Sub(b.Start()) >= time.Hour {
			<-next // the read at the preStop call, in the background
			next = b.Changed()
		}
		kill := b.Kill()
		assert.WithinRange(t, kill, first.Add(29*time.Second), first.Add(31*time.Second), "the first deletion's 30 s")

		deletePod(t, c, name, 0) // kubectl delete --force --grace-period=0
		del, err := pod.Deletion(t.Context())
		require.NoError(t, err, "the finalizer keeps the pod")
		assert.Equal(t, time.Second, del.Grace, "the kubelet's 1 s for a grace of 0")

		rep := d.Shutdown(t.Context())
		require.NoError(t, rep.Err())
		t.Logf("SIGKILL read at the preStop call T0+%v, in the Report T0+%v (SIGTERM at T0+%v)",
			kill.Sub(rep.Budget.Start).Round(time.Millisecond), rep.Budget.Kill.Sub(rep.Budget.Start).Round(time.Millisecond),
			rep.Budget.SIGTERM.Sub(rep.Budget.Start).Round(time.Millisecond))
		assert.True(t, rep.Budget.Kill.Equal(kill), "the kubelet keeps the 30 s its termination started with: SIGKILL %v, want %v",
			rep.Budget.Kill, kill)
		assert.Contains(t, logs.String(), "a second deletion shortened the pod's grace")
	})

	// docs/faults.md row 2741: RequireTerminating reads the pod before the
	// hook sees the kubelet's call, and the preStop handler took T0 when the
	// guard let the call through: an API server that does not answer held
	// it for the read's timeout, and T0, so SIGKILL, was planned that much
	// after the kubelet's, whose grace runs from its call.
	//
	//	delete 30 s ── the API server stalls
	//	the kubelet calls the hook: the guard's read waits 2 s, lets it through
	//	T0 = the call, not the read's end
	t.Run("AGuardsReadOfAStalledAPIServerDoesNotMoveT0", func(t *testing.T) {
		createPod(t, c, "stalled-0")
		pod, err := kube.New("stalled-0", podConfig(t, c, realapiserver.PodToken))
		require.NoError(t, err)
		deletePod(t, c, "stalled-0", 30)
		b, err := deadline.New(3600*time.Second, deadline.Config{Margin: time.Second})
		require.NoError(t, err)
		d, err := drain.New(drain.Config{Budget: b, Sandboxes: draintest.NewNode(), Pod: pod})
		require.NoError(t, err)
		requireTerminating := drain.RequireTerminating(pod, 2*time.Second)
		var checked time.Time
		guard := drain.HookGuard{Check: func(r *http.Request) error {
			checked = time.Now()
			return requireTerminating(r)
		}}
		r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/drain?wait=0s", nil)
		r.RemoteAddr = "127.0.0.1:5"

		resume := c.Stall(t)
		called := time.Now()
		guard.Wrap(d.PreStop()).ServeHTTP(httptest.NewRecorder(), r)
		held := time.Since(called)
		resume()
		t.Logf("the call held %v by the guard's read; T0 at the call + %v", held.Round(time.Millisecond), b.Start().Sub(called).Round(time.Millisecond))
		assert.GreaterOrEqual(t, held, 2*time.Second, "the guard's read waited out its timeout")
		assert.False(t, b.Start().After(checked), "T0 %v is the call's arrival, before the guard's read %v began", b.Start(), checked)
		rep := d.Shutdown(t.Context())
		require.NoError(t, rep.Err())
	})

	// docs/faults.md row 2742: a read whose connection was cut while its
	// answer came (an API server's instance going away behind the Service,
	// a load balancer's reset) failed, and the drain read again a second
	// later (row 701): the deletion's shorter grace stayed out of the plan
	// that long. A GET changes nothing, and each read has a connection of
	// its own: it is sent again at once.
	//
	//	preStop ── read 1: 200, half the pod, reset ── read 2: the deletion
	t.Run("ReadCutMidAnswerIsSentAgain", func(t *testing.T) {
		created := createPod(t, c, "cut-0")
		deletePod(t, c, "cut-0", 30)
		front, sent := cutFirstAnswer(t, c)
		cfg := podConfig(t, c, realapiserver.PodToken)
		cfg.Host, cfg.UID = front, string(created.UID) // the Events read nothing
		pod, err := kube.New("cut-0", cfg)
		require.NoError(t, err)
		b, err := deadline.New(3600*time.Second, deadline.Config{Margin: time.Second})
		require.NoError(t, err)
		var logs logbuf.Buffer
		read := logbuf.NewSignal(`msg="drain: the pod's deletion read"`)
		d, err := drain.New(drain.Config{Budget: b, Sandboxes: draintest.NewNode(), Pod: pod,
			Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, read), nil))})
		require.NoError(t, err)

		called := time.Now()
		d.PreStop().ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/drain?wait=0s", nil))
		select { // the read that answered, in the background
		case <-read.Seen():
		case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
			require.Fail(t, "no read of the pod answered", logs.String())
		}
		t.Logf("SIGKILL tightened to the deletion's %v after the preStop call, %d reads", time.Since(called).Round(time.Millisecond), sent.Load())
		assert.Equal(t, int32(2), sent.Load(), "the cut read and the one sent again at once")
		assert.Contains(t, logs.String(), `msg="drain: the pod's deletion read" at=preStop`, "the preStop call's read answered")
		assert.NotContains(t, logs.String(), "could not be read")
		rep := d.Shutdown(t.Context())
		require.NoError(t, rep.Err())
		assert.Less(t, rep.Budget.Kill.Sub(rep.Budget.Start), 31*time.Second, "the deletion's 30 s")
	})

	// A read taken on an HTTP/2 connection whose API server sent a GOAWAY
	// naming it taken, and whose connection then ended with it unanswered
	// (the instance's process ending, a load balancer dropping the
	// connection), is sent again at once on the next connection. Go's
	// transport sends again itself only a request the GOAWAY did not take.
	//
	//	etcd stalls ── the read taken on conn 1, unanswered
	//	reads of /version on conn 1 until one's answer brings a GOAWAY
	//	(--goaway-chance): the client dials conn 2
	//	the front ends conn 1 ── etcd resumes ── the read sent again on conn 2
	t.Run("ReadLostWithAGoAwayIsSentAgain", func(t *testing.T) {
		h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: clusterCA(t, c), MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
		front, gets, resumeEtcd, done := readHeldByEtcd(t, c, "goaway-0", h2)
		probes := 0
		for ; front.accepted() < 2 && probes < 5000; probes++ {
			probeVersion(t, h2, front.url)
		}
		require.Equal(t, 2, front.accepted(), "no GOAWAY in %d answers", probes)
		front.endFirst()
		resumeEtcd()
		r := <-done
		first := gets.firstErr()
		t.Logf("GOAWAY after %d reads of /version; the read lost with conn 1: %v", probes, first)
		require.NoError(t, r.err)
		assert.Equal(t, 30*time.Second, r.d.Grace)
		assert.Equal(t, int32(2), gets.n.Load(), "the read lost and the one sent again")
		require.Error(t, first, "the first read was lost")
		assert.False(t, errors.Is(first, io.EOF) || errors.Is(first, io.ErrUnexpectedEOF) || errors.Is(first, syscall.ECONNRESET),
			"lost after a GOAWAY, not to a bare cut: %v", first)
	})

	// docs/faults.md row 3060: a read taken on an HTTP/2 connection that
	// went silent (its API server instance's node lost, a network
	// partition: no FIN, no reset) failed when the transport's health
	// check gave the connection up ("http2: client connection lost", as
	// client-go's transports ping after 30 s without a frame), where the
	// next connection, through the load balancer, answers at once.
	//
	//	etcd stalls ── the read taken on conn 1, unanswered ── conn 1 goes silent
	//	no frame for 1 s: a PING, unanswered for 1 s ── conn 1 given up
	//	the read sent again at once on conn 2
	t.Run("ReadOnAConnectionGoneSilentIsSentAgain", func(t *testing.T) {
		h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: clusterCA(t, c), MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true,
			HTTP2: &http.HTTP2Config{SendPingTimeout: time.Second, PingTimeout: time.Second}}
		front, gets, resumeEtcd, done := readHeldByEtcd(t, c, "silent-0", h2)
		front.silenceFirst()
		resumeEtcd() // the answer comes, into the silence
		r := <-done
		first := gets.firstErr()
		t.Logf("the read taken on the silent conn 1: %v; connections %d", first, front.accepted())
		require.NoError(t, r.err)
		assert.Equal(t, 30*time.Second, r.d.Grace)
		assert.Equal(t, int32(2), gets.n.Load(), "the read lost and the one sent again")
		assert.Equal(t, 2, front.accepted(), "the first read on conn 1, the second on conn 2")
		require.Error(t, first, "the first read was lost")
	})

	// docs/faults.md row 1030: in a pod, reads are made with the pod's own
	// token, bound to it, which the API server takes only while the pod is
	// there with its UID: after a force deletion (kubectl delete --force
	// --grace-period=0) every read is a 401, never the 404 that plans the
	// kubelet's SIGKILL 2 s after SIGTERM (row 580), and the drain kept the
	// manifest's hour. (The other cases read with a static token, which no
	// deletion touches.)
	t.Run("ForceDeletionIsSeenThroughThePodsOwnToken", func(t *testing.T) {
		created := createPod(t, c, "bound-0")
		started, rotated := boundToken(t, c, created), boundToken(t, c, created)
		cfg := kube.Config{Host: c.URL, Namespace: ns, CAFile: c.CAFile,
			TokenFile: writeToken(t, filepath.Join(t.TempDir(), "token"), started)}
		pod, err := kube.New("bound-0", cfg)
		require.NoError(t, err)
		_, err = pod.Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrNotTerminating, "read at start with the pod's own token")
		require.True(t, pod.Identity().Confirmed)

		deletePod(t, c, "bound-0", 0)
		// A token the API server has not cached: the kubelet's rotation
		// writes one; the one read at start is refused the same once the
		// API server's 10 s cache of its last success has passed.
		writeToken(t, cfg.TokenFile, rotated)
		_, err = pod.Deletion(t.Context())
		var apiErr *kube.APIError
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode, "what the API server answers the pod's token")
		assert.True(t, kube.IsNotFound(err), "the pod's removal: %v", err)
		assert.Contains(t, err.Error(), "the API server no longer has this pod")
		assert.Contains(t, err.Error(), string(created.UID))

		// A StatefulSet's new pod in its name: the same 401.
		createPod(t, c, "bound-0")
		_, err = pod.Deletion(t.Context())
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
		assert.True(t, kube.IsNotFound(err), "another pod in its name: %v", err)

		// The drain of a pod force-deleted: its first read, the preStop
		// call's, plans the kubelet's SIGKILL 2 s after the call (the
		// budget's floor makes it SIGTERM + 2 s), where a failed read left
		// the hour: with POD_UID set, and with the package doc's
		// kube.Config{}, the UID then the token's (row 1032).
		for _, podUID := range []bool{true, false} {
			t.Run(fmt.Sprintf("drain, POD_UID set %v", podUID), func(t *testing.T) {
				name := fmt.Sprintf("bound-uid-%v", podUID)
				gone := createPod(t, c, name)
				cfg := kube.Config{Host: c.URL, Namespace: ns, CAFile: c.CAFile,
					TokenFile: writeToken(t, filepath.Join(t.TempDir(), "token"), boundToken(t, c, gone))}
				if podUID {
					cfg.UID = string(gone.UID)
				}
				deletePod(t, c, name, 0)
				pod, err := kube.New(name, cfg)
				require.NoError(t, err)
				rep, logs := drainPlansForceDeletion(t, pod)
				assert.Equal(t, string(gone.UID), pod.UID())
				t.Logf("SIGKILL planned at T0 + 2s, then SIGTERM + %v; log:\n%s", rep.Budget.Kill.Sub(rep.Budget.SIGTERM), logs)
			})
		}
	})

	// docs/faults.md row 3444: every 404 was the pod's removal, which the
	// drain takes for a force deletion (SIGKILL 2 s after SIGTERM). The
	// API server names the pod in the Status of its 404 for a pod it does
	// not have; a path it does not serve gets its "404 page not found"
	// (a Config.Host with a proxy's path prefix, as Rancher's
	// /k8s/clusters/ID, pointed at the API server itself), which named no
	// pod and planned the force deletion all the same, where the kubelet
	// gives the deletion's hour.
	t.Run("A404ThatNamesNoPodIsNotThePodsRemoval", func(t *testing.T) {
		createPod(t, c, "removed-by-name")
		deletePod(t, c, "removed-by-name", 0)
		removed, err := kube.New("removed-by-name", podConfig(t, c, realapiserver.AdminToken))
		require.NoError(t, err)
		_, err = removed.Deletion(t.Context())
		assert.True(t, kube.IsNotFound(err), "the API server's 404 for a pod it does not have: %v", err)

		behind := createPod(t, c, "behind-a-prefix")
		cfg := podConfig(t, c, realapiserver.AdminToken)
		cfg.Host, cfg.UID = c.URL+"/k8s/clusters/c-1", string(behind.UID) // POD_UID set: a 404 can read as its removal
		pod, err := kube.New("behind-a-prefix", cfg)
		require.NoError(t, err)
		b, err := deadline.New(3600*time.Second, deadline.Config{})
		require.NoError(t, err)
		var logs logbuf.Buffer
		failed := logbuf.NewSignal("the pod's deletion could not be read")
		d, err := drain.New(drain.Config{Budget: b, Sandboxes: draintest.NewNode(), Pod: pod,
			Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, failed), nil))})
		require.NoError(t, err)
		d.PreStop().ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/drain?wait=0s", nil))
		select {
		case <-failed.Seen():
		case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
			require.Fail(t, "the read at the preStop call was not a failed read", "SIGKILL at T0 + %v; log:\n%s", b.Kill().Sub(b.Start()), logs.String())
		}
		assert.Equal(t, 3600*time.Second, b.Kill().Sub(b.Start()), "the budget stands: no force deletion planned")
		assert.Contains(t, logs.String(), "404 page not found")
		assert.Contains(t, logs.String(), "names no pod")
		assert.NotContains(t, logs.String(), "a force deletion")
		d.Shutdown(t.Context())
	})

	// Row 3444's rule, that a 404 is the pod's removal only when its Status
	// names a pod, read against what the API server answers for a pod
	// removed as a drain sees it: through a proxy in front with a path
	// prefix of its own (Rancher's /k8s/clusters/ID), and in a namespace
	// being deleted. Each answer names the pod, and a drain with POD_UID
	// set still plans the force deletion's SIGKILL 2 s after T0, not the
	// hour of a failed read.
	t.Run("ARemovedPodIsNamedInIts404ThroughAProxyAndInANamespaceBeingDeleted", func(t *testing.T) {
		proxy, proxyCA := prefixingProxy(t, c, "/k8s/clusters/c-1")
		behind := createPod(t, c, "removed-behind-a-proxy")
		deletePod(t, c, behind.Name, 0)
		forceDeletionPlanned(t, behind, kube.Config{Host: proxy + "/k8s/clusters/c-1", Namespace: ns, CAFile: proxyCA,
			TokenFile: c.TokenFile(t, realapiserver.AdminToken), UID: string(behind.UID)})

		const doomed = "doomed-pods"
		c.MustDo(t, http.MethodPost, "/api/v1/namespaces", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomed}}, http.StatusCreated, nil)
		c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+doomed+"/serviceaccounts",
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, http.StatusCreated, nil)
		var inDoomed corev1.Pod
		c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+doomed+"/pods", &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "sandboxd-0"},
			Spec: corev1.PodSpec{NodeName: "node-that-does-not-exist", TerminationGracePeriodSeconds: new(int64(3600)),
				Containers: []corev1.Container{{Name: "sandboxd", Image: "sandboxd"}}},
		}, http.StatusCreated, &inDoomed)
		// No namespace controller runs here: the namespace stays
		// Terminating, as it does while its pods drain.
		c.MustDo(t, http.MethodDelete, "/api/v1/namespaces/"+doomed, nil, http.StatusOK, nil)
		c.MustDo(t, http.MethodDelete, "/api/v1/namespaces/"+doomed+"/pods/sandboxd-0",
			&metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}, http.StatusOK, nil)
		forceDeletionPlanned(t, &inDoomed, kube.Config{Host: c.URL, Namespace: doomed, CAFile: c.CAFile,
			TokenFile: c.TokenFile(t, realapiserver.AdminToken), UID: string(inDoomed.UID)})
	})

	// docs/faults.md row 1110: the API server answers a token of an
	// audience it does not take (a serviceAccountToken volume of another
	// service's audience) with the bare 401 it answers the token of a pod
	// removed, at every read, so every 401 to a token bound to the pod was
	// its removal: a drain with no read at start planned SIGKILL 2 s after
	// SIGTERM where the kubelet gives the deletion's hour, and one with a
	// read at start said POD_NAME or POD_UID did not name the pod.
	t.Run("TokenOfAnotherAudienceIsNotThePodsRemoval", func(t *testing.T) {
		removed := createPod(t, c, "removed-0")
		removedToken := boundToken(t, c, removed)
		deletePod(t, c, "removed-0", 0)
		other := createPod(t, c, "audience-0")
		otherToken := boundToken(t, c, other, "vault")
		codeR, bodyR, err := c.Do(removedToken, http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/removed-0", nil)
		require.NoError(t, err)
		codeA, bodyA, err := c.Do(otherToken, http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/audience-0", nil)
		require.NoError(t, err)
		assert.Equal(t, []int{http.StatusUnauthorized, http.StatusUnauthorized}, []int{codeR, codeA})
		assert.JSONEq(t, string(bodyR), string(bodyA), "the answer tells nothing apart")
		// Only a TokenReview does, which a pod cannot make with its token
		// refused.
		assert.Contains(t, tokenReview(t, c, otherToken), `token audiences ["vault"] is invalid for the target audiences`)
		assert.Contains(t, tokenReview(t, c, removedToken), "service account token has been invalidated")

		for _, readAtStart := range []bool{false, true} {
			t.Run(fmt.Sprintf("read at start %v", readAtStart), func(t *testing.T) {
				name := fmt.Sprintf("audience-start-%v", readAtStart)
				created := createPod(t, c, name)
				var logs logbuf.Buffer
				stands := logbuf.NewSignal("the budget stands")
				pod, err := kube.New(name, kube.Config{Host: c.URL, Namespace: ns, CAFile: c.CAFile, UID: string(created.UID),
					TokenFile: writeToken(t, filepath.Join(t.TempDir(), "token"), boundToken(t, c, created, "vault"))})
				require.NoError(t, err)
				if readAtStart { // as drain.ConfigFromEnv and the examples
					_, err := pod.Spec(t.Context())
					var apiErr *kube.APIError
					require.ErrorAs(t, err, &apiErr)
					assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
					assert.False(t, kube.IsNotFound(err), "%v", err)
					assert.Contains(t, err.Error(), `its audience ["vault"]`)
					assert.Nil(t, pod.Identity().Mismatch, "not a name that is not the pod's")
				}
				deletePod(t, c, name, 3600) // the kubelet gives the deletion's hour
				b, err := deadline.New(3600*time.Second, deadline.Config{})
				require.NoError(t, err)
				d, err := drain.New(drain.Config{Budget: b, Sandboxes: draintest.NewNode(), Pod: pod,
					Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, stands), nil))})
				require.NoError(t, err)
				d.PreStop().ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/drain?wait=0s", nil))
				select {
				case <-stands.Seen():
				case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
				}
				kill := b.Kill().Sub(b.Start())
				rep := d.Shutdown(t.Context())
				assert.Equal(t, time.Hour, kill, "SIGKILL at T0 + the hour; log:\n%s", logs.String())
				assert.Empty(t, rep.PodMismatch)
				assert.NotContains(t, logs.String(), "force deletion")
				assert.NotContains(t, logs.String(), "does not name this pod")
				assert.Contains(t, logs.String(), "is refused the same as the token of a pod removed")
				t.Logf("SIGKILL at T0 + %v; log:\n%s", kill, logs.String())
			})
		}
	})

	t.Run("DrainPostsItsEventsOnThePod", func(t *testing.T) {
		created := createPod(t, c, "sandboxd-0")
		_, answered := deletePod(t, c, "sandboxd-0", 20)
		var logs logbuf.Buffer
		cfg := podConfig(t, c, realapiserver.PodToken)
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		pod, err := kube.New("sandboxd-0", cfg)
		require.NoError(t, err)
		rep, _ := drainNode(t, pod, true, "", &logs)

		require.NotNil(t, rep.Events)
		assert.Equal(t, kube.EventStats{Posted: 4}, *rep.Events, "log:\n%s", logs.String())
		assert.WithinRange(t, rep.Budget.Kill, answered, answered.Add(21*time.Second), "the deletion's 20 s, not the hour")

		// Listed back as kubectl describe pod lists them: by the pod's
		// name and UID, through the core/v1 API.
		var list corev1.EventList
		c.MustDo(t, http.MethodGet, "/api/v1/namespaces/"+ns+"/events?fieldSelector=involvedObject.name%3Dsandboxd-0,involvedObject.uid%3D"+
			string(created.UID), nil, http.StatusOK, &list)
		reasons := map[string]corev1.Event{}
		for _, ev := range list.Items {
			reasons[ev.Reason] = ev
			assert.Equal(t, "drainkit", ev.ReportingController)
			assert.Equal(t, "sandboxd-0", ev.ReportingInstance)
			assert.Equal(t, "Pod", ev.InvolvedObject.Kind)
			t.Logf("event %s %s %s: %s", ev.Type, ev.Reason, ev.Action, ev.Message)
		}
		require.Len(t, list.Items, 4)
		assert.Contains(t, reasons["DrainStarted"].Message, "preStop hook called")
		assert.Equal(t, corev1.EventTypeWarning, reasons["SandboxesLost"].Type)
		assert.Contains(t, reasons["SandboxesLost"].Message, "broken(failed)")
		assert.Equal(t, "ublk", reasons["StepFinished"].Action)
		assert.Contains(t, reasons["StepFinished"].Message, "ublk teardown: stopped")
		assert.Equal(t, corev1.EventTypeWarning, reasons["DrainFinished"].Type)
		assert.Contains(t, reasons["DrainFinished"].Message, "2 of 3 sandboxes preserved, 1 lost")
	})

	// docs/faults.md row 1031: `kubectl delete namespace` ends its pods with
	// their grace, and the API server's admission refuses every create in
	// the namespace from then on, the drain's Events too, with a 403 that
	// no RBAC rule would change (even an admin's): the drop said the
	// service account needed RBAC "create" on "events".
	t.Run("EventsInANamespaceBeingDeletedAreNotBlamedOnRBAC", func(t *testing.T) {
		const doomed = "doomed"
		c.MustDo(t, http.MethodPost, "/api/v1/namespaces", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: doomed}}, http.StatusCreated, nil)
		c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+doomed+"/serviceaccounts",
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, http.StatusCreated, nil)
		c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+doomed+"/pods", &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "sandboxd-0"},
			Spec: corev1.PodSpec{NodeName: "node-that-does-not-exist", TerminationGracePeriodSeconds: new(int64(30)),
				Containers: []corev1.Container{{Name: "sandboxd", Image: "sandboxd"}}},
		}, http.StatusCreated, nil)
		pod, err := kube.New("sandboxd-0", kube.Config{Host: c.URL, Namespace: doomed, CAFile: c.CAFile,
			TokenFile: c.TokenFile(t, realapiserver.AdminToken)})
		require.NoError(t, err)
		pod.Record(kube.Event{Reason: "DrainStarted"})
		require.Equal(t, kube.EventStats{Posted: 1}, pod.Flush(t.Context()), "before the namespace's deletion")

		// No namespace controller runs here: the namespace stays
		// Terminating, as it does while its pods drain.
		c.MustDo(t, http.MethodDelete, "/api/v1/namespaces/"+doomed, nil, http.StatusOK, nil)
		pod.Record(kube.Event{Reason: "DrainFinished"})
		stats := pod.Flush(t.Context())
		assert.Equal(t, 1, stats.Dropped)
		assert.Contains(t, stats.LastError, "403 Forbidden")
		assert.Contains(t, stats.LastError, "because it is being terminated")
		assert.Contains(t, stats.LastError, "the namespace is being deleted")
		assert.NotContains(t, stats.LastError, "needs RBAC")
		t.Logf("dropped: %s", stats.LastError)
	})

	t.Run("RBACDeniedIsReportedAndDoesNotHoldUpTheDrain", func(t *testing.T) {
		createPod(t, c, "denied-0")
		deletePod(t, c, "denied-0", 20)
		var logs logbuf.Buffer
		cfg := podConfig(t, c, realapiserver.NoneToken)
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		pod, err := kube.New("denied-0", cfg)
		require.NoError(t, err)

		_, err = pod.Deletion(t.Context())
		var apiErr *kube.APIError
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusForbidden, apiErr.StatusCode)
		assert.Equal(t, "Forbidden", apiErr.Reason)
		assert.Contains(t, err.Error(), `User "nobody" cannot get resource "pods"`)
		assert.Contains(t, err.Error(), `needs RBAC "get" on "pods"`)

		rep, took := drainNode(t, pod, false, "the budget stands", &logs)
		require.NotNil(t, rep.Events)
		assert.Equal(t, 0, rep.Events.Posted)
		assert.Equal(t, 4, rep.Events.Dropped)
		assert.Contains(t, rep.Events.LastError, "403")
		assert.Contains(t, rep.Events.LastError, `"create" on "events"`)
		assert.Contains(t, logs.String(), "Kubernetes Events dropped")
		assert.Contains(t, logs.String(), "the budget stands")
		// The manifest's hour stands (SIGTERM's arithmetic truncates the
		// hook's time to whole seconds: up to 1 s more).
		assert.WithinRange(t, rep.Budget.Kill, rep.Budget.Start.Add(time.Hour), rep.Budget.Start.Add(time.Hour+time.Second))
		// Not held up: the refusals come back at once; a bound, not a
		// timing: the event queue's flush alone may take 1 s.
		assert.Less(t, took, 30*time.Second)

		var list corev1.EventList
		c.MustDo(t, http.MethodGet, "/api/v1/namespaces/"+ns+"/events?fieldSelector=involvedObject.name%3Ddenied-0", nil, http.StatusOK, &list)
		assert.Empty(t, list.Items)
	})
}

// verdict is the ublk step's Detail as the drain sees it: a Stringer.
type verdict string

func (v verdict) String() string { return "ublk teardown: " + string(v) }

// drainNode runs a drain with pod as Config.Pod over three sandboxes, one
// of which fails to preserve, and a ublk-like step: the preStop call
// (answered at once), then, once the budget has the pod's deletion if
// tightens says it will, SIGTERM. It returns the Report and how long the
// drain took.
//
// With answered set, the drain's step waits until the log says it: a read
// of the pod still in flight when the drain ends is stopped, and logs
// nothing above DEBUG (docs/faults.md row 159), so a line the test expects
// of the read's answer must come before the drain's end.
func drainNode(t *testing.T, pod *kube.Pod, tightens bool, answered string, logs *logbuf.Buffer) (*drain.Report, time.Duration) {
	t.Helper()
	out := io.Writer(logs)
	var read *logbuf.Signal
	if answered != "" {
		read = logbuf.NewSignal(answered)
		out = io.MultiWriter(logs, read)
	}
	b, err := deadline.New(3600*time.Second, deadline.Config{Margin: time.Second})
	require.NoError(t, err)
	node := draintest.NewNode()
	node.AddN("sb", 2, time.Millisecond)
	node.Add(&draintest.Sandbox{Name: "broken", Latency: time.Millisecond, Faults: []draintest.Fault{draintest.Permanent}})
	d, err := drain.New(drain.Config{
		Budget: b, Sandboxes: node, Pod: pod,
		Logger: slog.New(slog.NewTextHandler(out, nil)),
		Steps: []drain.Step{drain.NewStep(deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(time.Second)},
			func(context.Context) (any, error) {
				if read != nil {
					select {
					case <-read.Seen():
					case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
					}
				}
				return verdict("stopped"), nil
			})},
	})
	require.NoError(t, err)
	start := time.Now()
	d.PreStop().ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/drain?wait=0s", nil))
	for tightens {
		next := b.Changed() // before the check: a change in between is not missed
		if b.Kill().Sub(b.Start()) < time.Hour {
			break
		}
		<-next // the read of the pod, in the background
	}
	rep := d.Shutdown(t.Context())
	took := time.Since(start)
	require.Error(t, rep.Err()) // the broken sandbox
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
	assert.False(t, errors.Is(rep.Err(), context.DeadlineExceeded))
	return rep, took
}

// cutFirstAnswer serves the cluster's API server through a front of its
// own on loopback, with the API server's certificate: each request is
// sent on to the API server and its answer passed back, but the first
// GET's answer only in part, its status and half its body, and then its
// connection is reset, as an API server instance that goes away behind
// the Service or a load balancer's reset cuts one. It returns the front's
// URL and the count of GETs that reached it (the drain's Events, POSTs,
// are passed on whole and not counted).
func cutFirstAnswer(t *testing.T, c *realapiserver.Cluster) (string, *atomic.Int32) {
	t.Helper()
	var sent atomic.Int32
	cert, err := tls.LoadX509KeyPair(filepath.Join(c.Dir, "apiserver.crt"), filepath.Join(c.Dir, "apiserver.key"))
	require.NoError(t, err)
	ca, err := os.ReadFile(c.CAFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := r.Method == http.MethodGet && sent.Add(1) == 1
		req, err := http.NewRequestWithContext(r.Context(), r.Method, c.URL+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, h := range []string{"Content-Type", "Date", "Retry-After"} {
			if v := resp.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(resp.StatusCode)
		if !first {
			_, _ = w.Write(body)
			return
		}
		_, _ = w.Write(body[:len(body)/2])
		_ = http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if tcp, ok := conn.(*tls.Conn).NetConn().(*net.TCPConn); ok {
			_ = tcp.SetLinger(0) // a reset, not an orderly close
			_ = tcp.Close()
		}
	}))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	front.StartTLS()
	t.Cleanup(front.Close)
	return front.URL, &sent
}

// clusterCA is the pool of the cluster's CA.
func clusterCA(t *testing.T, c *realapiserver.Cluster) *x509.CertPool {
	t.Helper()
	ca, err := os.ReadFile(c.CAFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	return pool
}

// A heldRead is how a pod's Deletion read ended.
type heldRead struct {
	d   kube.Deletion
	err error
}

// readHeldByEtcd creates the pod name, deletes it with a grace of 30 s,
// and starts its Deletion read through a front (newFront) over h2, with
// etcd stalled so that the API server holds the read unanswered; it
// returns once the read is sent. The caller resumes etcd and reads how
// the read ended from done.
func readHeldByEtcd(t *testing.T, c *realapiserver.Cluster, name string, h2 *http.Transport) (*front, *podGETs, func(), <-chan heldRead) {
	t.Helper()
	created := createPod(t, c, name)
	deletePod(t, c, name, 30)
	front := newFront(t, c.URL)
	t.Cleanup(h2.CloseIdleConnections)
	gets := &podGETs{rt: h2, sent: make(chan struct{})}
	cfg := podConfig(t, c, realapiserver.PodToken)
	cfg.Host, cfg.UID, cfg.Client = front.url, string(created.UID), &http.Client{Transport: gets}
	pod, err := kube.New(name, cfg)
	require.NoError(t, err)

	resumeEtcd := c.StallEtcd(t)
	done := make(chan heldRead, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a hang guard
	t.Cleanup(cancel)
	go func() {
		d, err := pod.Deletion(ctx)
		done <- heldRead{d, err}
	}()
	select {
	case <-gets.sent:
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		require.Fail(t, "the read was not sent")
	}
	return front, gets, resumeEtcd, done
}

// podGETs is a Config.Client's transport that counts the GETs of the pod
// sent through rt, closes sent once the first was written whole, and keeps
// the first one's error.
type podGETs struct {
	rt   http.RoundTripper
	sent chan struct{}
	n    atomic.Int32
	once sync.Once
	mu   sync.Mutex
	err  error
}

func (g *podGETs) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/pods/") {
		return g.rt.RoundTrip(r)
	}
	first := g.n.Add(1) == 1
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{WroteRequest: func(w httptrace.WroteRequestInfo) {
		if w.Err == nil {
			g.once.Do(func() { close(g.sent) })
		}
	}}))
	resp, err := g.rt.RoundTrip(r)
	if first {
		g.mu.Lock()
		g.err = err
		g.mu.Unlock()
	}
	return resp, err
}

func (g *podGETs) firstErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// probeVersion reads /version through rt as the admin: an answer that needs
// no etcd.
func probeVersion(t *testing.T, rt http.RoundTripper, base string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/version", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+realapiserver.AdminToken)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// front is a TCP relay on loopback to an API server, as a load balancer in
// front of one of its instances: it passes each connection's bytes through
// as they are (TLS end to end), counts the connections, and can end the
// first, as the instance's process ending does, or silence it, as the
// instance's node lost or a network partition does: no byte gets through
// any more, and nothing says so.
type front struct {
	url    string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	relays []*relay // in accept order
}

// A relay is one connection through the front: its client and server
// sides.
type relay struct {
	client, server net.Conn
	silent         atomic.Bool
}

func newFront(t *testing.T, target string) *front {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &front{url: "https://" + ln.Addr().String(), ln: ln}
	f.wg.Add(1)
	go f.serve(u.Host)
	t.Cleanup(func() {
		_ = ln.Close()
		f.mu.Lock()
		for _, r := range f.relays {
			r.end()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *front) serve(backend string) {
	defer f.wg.Done()
	for {
		client, err := f.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", backend)
		if err != nil {
			_ = client.Close()
			continue
		}
		r := &relay{client: client, server: server}
		f.mu.Lock()
		f.relays = append(f.relays, r)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(r, client, server)
		go f.pipe(r, server, client)
	}
}

// pipe copies from one side of r to the other, dropping what it reads
// while r is silent, and ends both sides when one ends.
func (f *front) pipe(r *relay, dst, src net.Conn) {
	defer f.wg.Done()
	defer r.end()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !r.silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) end() {
	_ = r.client.Close()
	_ = r.server.Close()
}

func (f *front) accepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.relays)
}

// endFirst closes the first connection, both its sides.
func (f *front) endFirst() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.relays[0].end()
}

// silenceFirst drops every byte of the first connection from now on, both
// ways, its sides left open.
func (f *front) silenceFirst() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.relays[0].silent.Store(true)
}

// prefixingProxy is a proxy in front of c's API server, on loopback, as
// Rancher's is: its https URL, and the file of its certificate, passes a
// request under prefix to the API server with prefix taken off, the
// answer as it comes, and answers any other with a page of its own.
func prefixingProxy(t *testing.T, c *realapiserver.Cluster, prefix string) (host, caFile string) {
	t.Helper()
	target, err := url.Parse(c.URL)
	require.NoError(t, err)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: clusterCA(t, c), MinVersion: tls.VersionTLS12}}
	rp := &httputil.ReverseProxy{Transport: tr, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.URL.Path = strings.TrimPrefix(r.In.URL.Path, prefix)
		r.Out.URL.RawPath = ""
	}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, prefix+"/") {
			http.NotFound(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); tr.CloseIdleConnections() })
	caFile = filepath.Join(t.TempDir(), "proxy-ca.crt")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	return srv.URL, caFile
}

// forceDeletionPlanned reads removed, a pod the API server no longer has,
// through cfg, as a drain's preStop call does: the read is the pod's
// removal (kube.IsNotFound), and the drain plans the kubelet's SIGKILL
// 2 s after T0, a force deletion's, not the hour of a failed read.
func forceDeletionPlanned(t *testing.T, removed *corev1.Pod, cfg kube.Config) {
	t.Helper()
	pod, err := kube.New(removed.Name, cfg)
	require.NoError(t, err)
	_, err = pod.Deletion(t.Context())
	require.True(t, kube.IsNotFound(err), "the API server's 404 for %s/%s: %v", removed.Namespace, removed.Name, err)
	t.Logf("the read of %s/%s: %v", removed.Namespace, removed.Name, err)

	pod, err = kube.New(removed.Name, cfg)
	require.NoError(t, err)
	drainPlansForceDeletion(t, pod)
}

// drainPlansForceDeletion drains a node through pod, a pod the API server
// no longer has, as a preStop call that waits for nothing and then
// Shutdown: the read at the preStop call plans the kubelet's SIGKILL 2 s
// after T0, a force deletion's, and the log says so. It returns the
// drain's Report and log.
func drainPlansForceDeletion(t *testing.T, pod *kube.Pod) (*drain.Report, string) {
	t.Helper()
	b, err := deadline.New(3600*time.Second, deadline.Config{})
	require.NoError(t, err)
	var logs logbuf.Buffer
	d, err := drain.New(drain.Config{Budget: b, Sandboxes: draintest.NewNode(), Pod: pod,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	d.PreStop().ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/drain?wait=0s", nil))
	timeout := time.After(10 * time.Second) // a hang guard, not a timing assertion
	for b.Kill().Sub(b.Start()) != 2*time.Second {
		select {
		case <-b.Changed():
		case <-timeout:
			require.Fail(t, "the read at the preStop call did not plan the force deletion's 2 s",
				"SIGKILL at T0 + %v; log:\n%s", b.Kill().Sub(b.Start()), logs.String())
		}
	}
	rep := d.Shutdown(t.Context())
	assert.Contains(t, logs.String(), "a force deletion")
	return rep, logs.String()
}
