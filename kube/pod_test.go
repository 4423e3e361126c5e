package kube_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/kube"
)

const (
	testNamespace = "agentenv"
	testPod       = "agentenv-node-x7k2p"
	testPodsPath  = "/api/v1/namespaces/agentenv/pods/"
	testPodPath   = testPodsPath + "agentenv-node-x7k2p"
	testEventPath = "/apis/events.k8s.io/v1/namespaces/agentenv/events"
)

// apiServer is a TLS API server on loopback that serves one pod and takes
// events about it.
type apiServer struct {
	*httptest.Server
	mu     sync.Mutex
	token  string   // the token it accepts
	tokens []string // the tokens it was sent
	gets   int      // GETs of the pod
	serve  http.HandlerFunc
	// postEvent answers an event's POST; nil stores it in events and
	// answers 201.
	postEvent http.HandlerFunc
	events    []eventsv1.Event
}

func newAPIServer(t *testing.T, serve http.HandlerFunc) (*apiServer, kube.Config) {
	t.Helper()
	a := &apiServer{token: "token-1", serve: serve}
	var cfg kube.Config
	a.Server, cfg = fakeapiserver.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		a.mu.Lock()
		a.tokens = append(a.tokens, got)
		ok := got == "Bearer "+a.token
		a.mu.Unlock()
		if !ok {
			writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
			return
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == testPodPath:
			a.mu.Lock()
			a.gets++
			a.mu.Unlock()
			a.serve(w, r)
		case r.Method == http.MethodPost && r.URL.Path == testEventPath:
			a.mu.Lock()
			post := a.postEvent
			a.mu.Unlock()
			if post == nil {
				post = a.storeEvent
			}
			post(w, r)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, testPodsPath):
			fakeapiserver.PodNotFound(w, strings.TrimPrefix(r.URL.Path, testPodsPath)) // another pod's name
		default:
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no route "+r.Method+" "+r.URL.Path)
		}
	}), testNamespace, "token-1\n")
	require.Contains(t, a.URL, "https://127.0.0.1:")
	return a, cfg
}

// storeEvent keeps a posted event and answers 201 Created, as the API
// server does.
func (a *apiServer) storeEvent(w http.ResponseWriter, r *http.Request) {
	var ev eventsv1.Event
	if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&ev) != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "not a JSON event")
		return
	}
	a.mu.Lock()
	a.events = append(a.events, ev)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(&ev)
}

func (a *apiServer) posted() []eventsv1.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]eventsv1.Event(nil), a.events...)
}

func newPod(t *testing.T, cfg kube.Config, name string) *kube.Pod {
	t.Helper()
	p, err := kube.New(name, cfg)
	require.NoError(t, err)
	return p
}

func writePEM(t *testing.T, path string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
}

// podJSON serves a real v1.Pod, as the API server encodes it.
func podJSON(t *testing.T, mutate func(*corev1.Pod)) http.HandlerFunc {
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: testPod, Namespace: testNamespace, UID: "8d3c2f1e-0000-4000-8000-000000000001",
			Labels: map[string]string{"app": "agentenv-node"},
		},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(3600)),
			Containers: []corev1.Container{{
				Name: "server", Image: "agentenv/server:main",
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/prestop"},
				}},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if mutate != nil {
		mutate(pod)
	}
	body, err := json.Marshal(pod)
	require.NoError(t, err)
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
	})
}

func deleted(at time.Time, graceSeconds int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: at}
		p.DeletionGracePeriodSeconds = &graceSeconds
	}
}

func TestDeletionReadsDeletionTimestamp(t *testing.T) {
	kill := time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC)
	_, cfg := newAPIServer(t, podJSON(t, deleted(kill, 30)))
	r := newPod(t, cfg, testPod)
	d, err := r.Deletion(t.Context())
	require.NoError(t, err)
	assert.True(t, kill.Equal(d.Timestamp), "got %v", d.Timestamp)
	assert.Equal(t, 30*time.Second, d.Grace)

	ts, err := r.DeletionTimestamp(t.Context())
	require.NoError(t, err)
	assert.True(t, kill.Equal(ts))
}

// Fault (docs/faults.md row 234): `kubectl delete --grace-period` takes any
// int64, and the API server keeps it in deletionGracePeriodSeconds; past
// 292 years in seconds, the reader's conversion to a time.Duration
// overflowed into a short or negative Grace: the drain, which compares a
// later read's grace with the first one's, would take a shortened grace
// that no one gave. It now saturates at the largest Duration.
func TestDeletionGraceBeyondADurationSaturates(t *testing.T) {
	kill := time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC)
	for _, s := range []int64{9223372037, 1 << 40, math.MaxInt64} {
		_, cfg := newAPIServer(t, podJSON(t, deleted(kill, s)))
		d, err := newPod(t, cfg, testPod).Deletion(t.Context())
		require.NoError(t, err)
		assert.Equal(t, time.Duration(math.MaxInt64), d.Grace, "deletionGracePeriodSeconds %d", s)
	}
}

// Fault (docs/faults.md row 2740): a force deletion of a pod that a
// finalizer keeps in the API server leaves deletionGracePeriodSeconds 0,
// which the kubelet runs with its 1 s; read as no grace, the drain took it
// for SIGKILL at the deletionTimestamp, and after a longer deletion for a
// grace the kubelet does not give. It is the kubelet's 1 s, as a spec's 0.
func TestForceDeletionKeptByAFinalizerIsTheKubeletsOneSecond(t *testing.T) {
	at := time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC)
	_, cfg := newAPIServer(t, podJSON(t, deleted(at, 0)))
	d, err := newPod(t, cfg, testPod).Deletion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, time.Second, d.Grace)
	assert.True(t, at.Add(time.Second).Equal(d.Timestamp), "the deletion's time + the kubelet's 1 s: %v", d.Timestamp)
}

func TestDeletionSecondPrecisionFromTheAPIServer(t *testing.T) {
	// metav1.Time drops fractions of a second, so the reader sees the kill
	// time up to 1 s early.
	kill := time.Date(2026, 11, 30, 3, 30, 0, 900_000_000, time.UTC)
	_, cfg := newAPIServer(t, podJSON(t, deleted(kill, 30)))
	r := newPod(t, cfg, testPod)
	ts, err := r.DeletionTimestamp(t.Context())
	require.NoError(t, err)
	assert.True(t, kill.Truncate(time.Second).Equal(ts), "got %v", ts)
}

func TestDeletionNotTerminatingYet(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, nil))
	r := newPod(t, cfg, testPod)
	_, err := r.DeletionTimestamp(t.Context())
	assert.ErrorIs(t, err, kube.ErrNotTerminating)
}

// A pod the kubelet terminates on its own has no deletionTimestamp, and
// gets at most its spec's grace: Deletion says it with ErrNotTerminating,
// and with a deletion too.
func TestDeletionSaysTheSpecsGrace(t *testing.T) {
	spec := func(s int64) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = &s }
	}
	_, cfg := newAPIServer(t, podJSON(t, spec(45)))
	d, err := newPod(t, cfg, testPod).Deletion(t.Context())
	assert.ErrorIs(t, err, kube.ErrNotTerminating)
	assert.Equal(t, 45*time.Second, d.SpecGrace)

	kill := time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC)
	_, cfg = newAPIServer(t, podJSON(t, func(p *corev1.Pod) { spec(45)(p); deleted(kill, 30)(p) }))
	d, err = newPod(t, cfg, testPod).Deletion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 45*time.Second, d.SpecGrace)
	assert.Equal(t, 30*time.Second, d.Grace)

	// A 0 is the kubelet's 1 s, as Spec.Grace says it: read as none, a
	// budget built with more kept it through the kubelet's own termination.
	_, cfg = newAPIServer(t, podJSON(t, spec(0)))
	d, err = newPod(t, cfg, testPod).Deletion(t.Context())
	assert.ErrorIs(t, err, kube.ErrNotTerminating)
	assert.Equal(t, time.Second, d.SpecGrace, "spec.terminationGracePeriodSeconds 0")

	for _, s := range []int64{-1, math.MaxInt64} { // none that a Duration can hold: none
		_, cfg = newAPIServer(t, podJSON(t, spec(s)))
		d, err = newPod(t, cfg, testPod).Deletion(t.Context())
		assert.ErrorIs(t, err, kube.ErrNotTerminating)
		assert.Zero(t, d.SpecGrace, "spec.terminationGracePeriodSeconds %d", s)
	}
}

func TestDeletionAPIErrors(t *testing.T) {
	tests := []struct {
		name     string
		serve    http.HandlerFunc
		code     int
		reason   string
		contains string
	}{
		{"forbidden", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
				`pods "agentenv-node-x7k2p" is forbidden: User "system:serviceaccount:agentenv:default" cannot get resource "pods"`)
		}, 403, "Forbidden", `RBAC "get" on "pods"`},
		{"not found", func(w http.ResponseWriter, _ *http.Request) {
			fakeapiserver.PodNotFound(w, "agentenv-node-x7k2p")
		}, 404, "NotFound", `pods "agentenv-node-x7k2p" not found`},
		{"not a Status body", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "upstream connect error", http.StatusServiceUnavailable)
		}, 503, "", "upstream connect error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, cfg := newAPIServer(t, tc.serve)
			r := newPod(t, cfg, testPod)
			_, err := r.DeletionTimestamp(t.Context())
			var apiErr *kube.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, tc.code, apiErr.StatusCode)
			assert.Equal(t, tc.reason, apiErr.Reason)
			assert.Contains(t, err.Error(), tc.contains)
			assert.NotErrorIs(t, err, kube.ErrNotTerminating)
		})
	}
}

func TestDeletionNotFoundForAnotherName(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, deleted(time.Now(), 30)))
	r := newPod(t, cfg, "someone-else")
	_, err := r.DeletionTimestamp(t.Context())
	var apiErr *kube.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
}

func TestDeletionMalformedResponses(t *testing.T) {
	raw := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }
	}
	tests := []struct {
		name     string
		serve    http.HandlerFunc
		contains string
	}{
		{"truncated JSON", raw(`{"kind":"Pod","metadata":{"name":"agentenv-node-x7k2p","deletionTimestamp":"2026-`), "malformed"},
		{"timestamp of the wrong type", raw(`{"metadata":{"name":"agentenv-node-x7k2p","deletionTimestamp":12}}`), "malformed"},
		{"timestamp not RFC 3339", raw(`{"metadata":{"name":"agentenv-node-x7k2p","deletionTimestamp":"yesterday"}}`), "malformed"},
		{"HTML", raw(`<html>login</html>`), "malformed"},
		{"another pod", podJSON(t, func(p *corev1.Pod) { p.Name = "other" }), `describes "other"`},
		{"empty object", raw(`{}`), "not this pod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, cfg := newAPIServer(t, tc.serve)
			r := newPod(t, cfg, testPod)
			_, err := r.DeletionTimestamp(t.Context())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.contains)
			assert.NotErrorIs(t, err, kube.ErrNotTerminating)
		})
	}
}

func TestDeletionSlowServerBoundedByContext(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	cancelled := make(chan struct{})
	_, cfg := newAPIServer(t, func(w http.ResponseWriter, req *http.Request) {
		arrived <- struct{}{}
		select {
		case <-req.Context().Done():
			close(cancelled)
		case <-release: // the test is over
		}
		// Like a proxy that gives up: an empty 200. The reader must still
		// report the deadline, not a malformed pod.
	})
	defer close(release)
	r := newPod(t, cfg, testPod)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := r.DeletionTimestamp(ctx)
		errc <- err
	}()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second): // hang detector, not a timing assertion
		t.Fatal("DeletionTimestamp did not return after its context's deadline")
	}
	select {
	case <-arrived: // the request reached the server, which saw it abandoned
		<-cancelled
	default: // on a loaded machine the deadline can pass during the TLS handshake
		t.Log("the deadline passed before the request reached the server")
	}
}

// The race the test above can lose on a loaded machine, made certain: the
// deadline passes and the transport still hands over the empty 200 the
// server wrote when it gave up. The reader reports the deadline.
func TestEmptyAnswerAfterTheDeadlineIsTheDeadline(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, deleted(time.Now(), 30)))
	ctx, cancel := context.WithCancel(t.Context())
	cfg.Client = &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		cancel() // the deadline passes while the answer comes in
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	})}
	_, err := newPod(t, cfg, testPod).DeletionTimestamp(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotContains(t, err.Error(), "malformed response")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestDeletionRejectsWrongCA(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, deleted(time.Now(), 30)))
	r := newPod(t, cfg, testPod)
	writePEM(t, cfg.CAFile, selfSignedCA(t))
	_, err := r.DeletionTimestamp(t.Context())
	var verr *tls.CertificateVerificationError
	require.ErrorAs(t, err, &verr)
	var unknown x509.UnknownAuthorityError
	assert.ErrorAs(t, err, &unknown)
	a.mu.Lock()
	defer a.mu.Unlock()
	assert.Empty(t, a.tokens, "the token must not be sent to an untrusted server")
}

func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return der
}

func TestDeletionRereadsRotatedToken(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, deleted(time.Now(), 30)))
	r := newPod(t, cfg, testPod)
	_, err := r.DeletionTimestamp(t.Context())
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(cfg.TokenFile, []byte("token-2"), 0o600))
	a.mu.Lock()
	a.token = "token-2"
	a.mu.Unlock()
	_, err = r.DeletionTimestamp(t.Context())
	require.NoError(t, err)
	a.mu.Lock()
	defer a.mu.Unlock()
	assert.Equal(t, []string{"Bearer token-1", "Bearer token-2"}, a.tokens)
}

func TestDeletionWithOwnClient(t *testing.T) {
	a, cfg := newAPIServer(t, podJSON(t, deleted(time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC), 60)))
	cfg.CAFile = ""
	cfg.Client = a.Client()
	r := newPod(t, cfg, testPod)
	d, err := r.Deletion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, time.Minute, d.Grace)
}

func TestNewNamesTheBadField(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("t"), 0o600))
	emptyToken := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(emptyToken, nil, 0o600))
	notPEM := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	ok := kube.Config{Host: "https://127.0.0.1:1", TokenFile: token, CAFile: notPEM, Namespace: "ns"}
	tests := []struct {
		name     string
		mutate   func(*kube.Config)
		contains []string
	}{
		{"plain http", func(c *kube.Config) { c.Host = "http://10.96.0.1:443" }, []string{"Config.Host", "https"}},
		{"token file missing", func(c *kube.Config) { c.TokenFile = filepath.Join(dir, "nope") }, []string{"Config.TokenFile", "nope"}},
		{"token file empty", func(c *kube.Config) { c.TokenFile = emptyToken }, []string{"Config.TokenFile", "empty"}},
		{"CA not PEM", func(*kube.Config) {}, []string{"Config.CAFile", "no PEM"}},
		{"negative timeout", func(c *kube.Config) { c.EventTimeout = -time.Second }, []string{"Config.EventTimeout", "-1s"}},
		{"negative queue", func(c *kube.Config) { c.EventQueue = -1 }, []string{"Config.EventQueue", "-1"}},
	}
	for _, tc := range tests {
		cfg := ok
		tc.mutate(&cfg)
		_, err := kube.New("pod", cfg)
		require.Error(t, err, tc.name)
		for _, c := range tc.contains {
			assert.Contains(t, err.Error(), c, tc.name)
		}
	}
	// With a Client, no CA file is needed.
	cfg := ok
	cfg.CAFile, cfg.Client = "", http.DefaultClient
	_, err := kube.New("pod", cfg)
	require.NoError(t, err)

	var nilPod *kube.Pod
	_, err = nilPod.DeletionTimestamp(t.Context())
	assert.Error(t, err)
}

func serviceAccountDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	return dir
}

func TestNewInClusterFromTheServiceAccount(t *testing.T) {
	_, api := newAPIServer(t, podJSON(t, deleted(time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC), 45)))
	ca, err := os.ReadFile(api.CAFile)
	require.NoError(t, err)
	dir := serviceAccountDir(t, map[string]string{"token": "token-1\n", "ca.crt": string(ca), "namespace": testNamespace + "\n"})
	host, port, err := net.SplitHostPort(strings.TrimPrefix(api.Host, "https://"))
	require.NoError(t, err)
	env := map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
	p, err := kube.NewFrom(testPod, kube.Config{}, func(k string) string { return env[k] }, dir)
	require.NoError(t, err)
	assert.Equal(t, testNamespace, p.Namespace())
	assert.Equal(t, testPod, p.Name())
	d, err := p.Deletion(t.Context()) // the zero Config reaches the API server
	require.NoError(t, err)
	assert.Equal(t, 45*time.Second, d.Grace)

	// An IPv6 service address is bracketed; a set field wins over the mount.
	env["KUBERNETES_SERVICE_HOST"] = "fd00::1"
	p, err = kube.NewFrom(testPod, kube.Config{Namespace: "other"}, func(k string) string { return env[k] }, dir)
	require.NoError(t, err)
	assert.Equal(t, "other", p.Namespace())
}

func TestNewInClusterNamesEverythingMissing(t *testing.T) {
	dir := serviceAccountDir(t, map[string]string{"ca.crt": "garbage", "namespace": " \n"})
	_, err := kube.NewFrom("", kube.Config{}, func(string) string { return "" }, dir)
	require.Error(t, err)
	for _, want := range []string{"name", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "token file", "CA file", "namespace file"} {
		assert.Contains(t, err.Error(), want)
	}
	// Outside a cluster, the real one fails the same way.
	if _, statErr := os.Stat(kube.ServiceAccountDir); errors.Is(statErr, os.ErrNotExist) {
		_, err = kube.New(testPod, kube.Config{})
		assert.ErrorContains(t, err, "token file")
	}
}

func TestTightenCutsTheGracePeriod(t *testing.T) {
	// kubectl delete --grace-period=30 during the preStop hook: the API
	// server's deletionTimestamp is 30 s out, the manifest said 3600 s.
	t0 := time.Now().Truncate(time.Second) // the API's timestamps are whole seconds
	kill := t0.Add(30 * time.Second)
	_, cfg := newAPIServer(t, podJSON(t, deleted(kill, 30)))
	r := newPod(t, cfg, testPod)
	b, err := deadline.New(3600*time.Second, deadline.Config{})
	require.NoError(t, err)
	b.OnPreStop(t0)
	changed, err := r.Tighten(t.Context(), b)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.True(t, kill.Equal(b.Kill()), "kill %v, want %v", b.Kill(), kill)
	// The default margin follows the grace in use: the 30 s the deletion
	// left (3 s), not the manifest's hour (5 s).
	assert.Equal(t, 3*time.Second, b.Margin(), "the default margin of the deletion's grace")
	assert.True(t, kill.Add(-b.Margin()).Equal(b.Deadline()), "deadline %v, want %v", b.Deadline(), kill.Add(-b.Margin()))

	changed, err = r.Tighten(t.Context(), b) // the same time again: no change
	require.NoError(t, err)
	assert.False(t, changed)
}

func TestTightenLeavesBudgetAloneOnError(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, nil))
	r := newPod(t, cfg, testPod)
	b, err := deadline.New(3600*time.Second, deadline.Config{})
	require.NoError(t, err)
	t0 := time.Now()
	b.OnPreStop(t0)
	changed, err := r.Tighten(t.Context(), b)
	assert.ErrorIs(t, err, kube.ErrNotTerminating)
	assert.False(t, changed)
	assert.Equal(t, t0.Add(3600*time.Second), b.Kill())

	_, err = r.Tighten(t.Context(), nil)
	assert.ErrorContains(t, err, "budget")
}

func TestDeletionTracesEachRead(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(t.Context())) }()

	kill := time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC)
	_, cfg := newAPIServer(t, podJSON(t, deleted(kill, 30)))
	cfg.TracerProvider = tp
	_, err := newPod(t, cfg, testPod).DeletionTimestamp(t.Context())
	require.NoError(t, err)

	_, cfg = newAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "forbidden")
	})
	cfg.TracerProvider = tp
	_, err = newPod(t, cfg, testPod).DeletionTimestamp(t.Context())
	require.Error(t, err)

	spans := rec.Ended()
	require.Len(t, spans, 2)
	for _, s := range spans {
		assert.Equal(t, "kube.Pod.Deletion", s.Name())
		assert.Equal(t, trace.SpanKindClient, s.SpanKind())
		assert.Equal(t, kube.ScopeName, s.InstrumentationScope().Name)
		assert.Contains(t, s.Attributes(), attribute.String("k8s.pod.name", testPod))
		assert.Contains(t, s.Attributes(), attribute.String("k8s.namespace.name", testNamespace))
	}
	assert.Contains(t, spans[0].Attributes(), attribute.String("k8s.pod.deletion_timestamp", "2026-11-30T03:30:00Z"))
	assert.Contains(t, spans[0].Attributes(), attribute.Int64("k8s.pod.deletion_grace_period_seconds", 30))
	assert.Equal(t, codes.Unset, spans[0].Status().Code)
	assert.Equal(t, codes.Error, spans[1].Status().Code)
	assert.Contains(t, spans[1].Attributes(), attribute.Int("http.response.status_code", 403))
}

// The spec reads a server makes at start (its grace, its priority) are
// reads of the pod like Deletion's, traced the same way: a start slowed or
// refused by the API server shows in the trace beside the drain's.
func TestSpecReadsAreTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(t.Context())) }()

	_, cfg := newAPIServer(t, podJSON(t, func(p *corev1.Pod) { p.Spec.Priority = new(int32(1000)) }))
	cfg.TracerProvider = tp
	pod := newPod(t, cfg, testPod)
	_, err := pod.Grace(t.Context())
	require.NoError(t, err)
	_, err = pod.Priority(t.Context())
	require.NoError(t, err)

	_, cfg = newAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "forbidden")
	})
	cfg.TracerProvider = tp
	_, err = newPod(t, cfg, testPod).Grace(t.Context())
	require.Error(t, err)

	spans := rec.Ended()
	require.Len(t, spans, 3)
	for i, name := range []string{"kube.Pod.Grace", "kube.Pod.Priority", "kube.Pod.Grace"} {
		assert.Equal(t, name, spans[i].Name())
		assert.Equal(t, trace.SpanKindClient, spans[i].SpanKind())
		assert.Equal(t, kube.ScopeName, spans[i].InstrumentationScope().Name)
		assert.Contains(t, spans[i].Attributes(), attribute.String("k8s.pod.name", testPod))
		assert.Contains(t, spans[i].Attributes(), attribute.String("k8s.namespace.name", testNamespace))
	}
	assert.Contains(t, spans[0].Attributes(), attribute.Int64("k8s.pod.termination_grace_period_seconds", 3600))
	assert.Contains(t, spans[1].Attributes(), attribute.Int64("k8s.pod.priority", 1000))
	assert.Equal(t, codes.Unset, spans[0].Status().Code)
	assert.Equal(t, codes.Error, spans[2].Status().Code)
	assert.Contains(t, spans[2].Attributes(), attribute.Int("http.response.status_code", 403))
}

func TestGraceReadsTheSpec(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, nil)) // terminationGracePeriodSeconds: 3600
	g, err := newPod(t, cfg, testPod).Grace(t.Context())
	require.NoError(t, err)
	assert.Equal(t, time.Hour, g)

	_, cfg = newAPIServer(t, podJSON(t, func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = nil }))
	_, err = newPod(t, cfg, testPod).Grace(t.Context())
	assert.ErrorContains(t, err, "spec.terminationGracePeriodSeconds")

	_, cfg = newAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "forbidden")
	})
	_, err = newPod(t, cfg, testPod).Grace(t.Context())
	var apiErr *kube.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusForbidden, apiErr.StatusCode)
}

func TestPriorityReadsTheSpec(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, func(p *corev1.Pod) { p.Spec.Priority = new(int32(2000001000)) })) // system-node-critical
	prio, err := newPod(t, cfg, testPod).Priority(t.Context())
	require.NoError(t, err)
	assert.Equal(t, int32(2000001000), prio)

	_, cfg = newAPIServer(t, podJSON(t, nil))
	prio, err = newPod(t, cfg, testPod).Priority(t.Context())
	require.NoError(t, err)
	assert.Zero(t, prio, "no priority class")

	refusedAndUnmade(t, func(p *kube.Pod) error { _, err := p.Priority(t.Context()); return err })
}

// refusedAndUnmade checks a read of the pod against an API server that
// refuses it (403: an *APIError) and on a Pod not made by New.
func refusedAndUnmade(t *testing.T, read func(*kube.Pod) error) {
	t.Helper()
	_, cfg := newAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "forbidden")
	})
	var apiErr *kube.APIError
	require.ErrorAs(t, read(newPod(t, cfg, testPod)), &apiErr)
	assert.ErrorContains(t, read(nil), "kube.New")
}

// skewedPod serves the pod as an API server whose clock is skew ahead of
// this node's (negative: behind): its Date header, and a deletion that
// asked for graceSeconds, timed by that clock as the API server does.
func skewedPod(t *testing.T, skew time.Duration, graceSeconds int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().Add(skew)
		w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
		podJSON(t, deleted(now.Add(time.Duration(graceSeconds)*time.Second), graceSeconds))(w, r)
	}
}

// The deletionTimestamp is the API server's clock; the kubelet's SIGKILL
// comes the grace after it saw the deletion, by the node's. A node whose
// clock is ahead read a 30 s deletion as past (no budget at all), one
// whose clock is behind read it minutes late.
func TestDeletionTimestampIsInThisNodesClock(t *testing.T) {
	for _, skew := range []time.Duration{5 * time.Minute, -5 * time.Minute, 3 * time.Second, -3 * time.Second} {
		t.Run("server ahead by "+skew.String(), func(t *testing.T) {
			_, cfg := newAPIServer(t, skewedPod(t, skew, 30))
			before := time.Now()
			d, err := newPod(t, cfg, testPod).Deletion(t.Context())
			after := time.Now()
			require.NoError(t, err)
			// SIGKILL is 30 s after the deletion by this node's clock: up to
			// 1 s early for the timestamp's whole seconds, up to 1 s and the
			// round trip late for the Date header's.
			lo, hi := before.Add(29*time.Second), after.Add(31*time.Second)
			assert.True(t, !d.Timestamp.Before(lo) && !d.Timestamp.After(hi),
				"deletionTimestamp %v read as %v: want within [%v, %v] (now+30s)", skew, d.Timestamp.Sub(before), lo.Sub(before), hi.Sub(before))
			assert.InDelta(t, skew.Seconds(), d.ClockOffset.Seconds(), 1.5, "offset")
		})
	}
}

// A node 5 minutes ahead of the API server, kubectl delete --grace-period=30
// during the preStop hook: the budget's SIGKILL is 30 s out, not T0 (the
// server's deletionTimestamp, read in this node's clock, is 4m30s past).
func TestTightenWithANodeClockAheadOfTheAPIServer(t *testing.T) {
	_, cfg := newAPIServer(t, skewedPod(t, -5*time.Minute, 30))
	b, err := deadline.New(3600*time.Second, deadline.Config{})
	require.NoError(t, err)
	t0 := time.Now()
	b.OnPreStop(t0)
	changed, err := newPod(t, cfg, testPod).Tighten(t.Context(), b)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.GreaterOrEqual(t, b.Kill().Sub(t0), 28*time.Second, "SIGKILL at T0+%v", b.Kill().Sub(t0))
	assert.LessOrEqual(t, b.Kill().Sub(t0), 31*time.Second+time.Since(t0), "SIGKILL at T0+%v", b.Kill().Sub(t0))
}

func TestClockOffsetCorrectsOnlyWhatTheDateHeaderProves(t *testing.T) {
	sent := time.Date(2026, 12, 2, 16, 0, 0, 300_000_000, time.UTC)
	got := sent.Add(50 * time.Millisecond)
	date := func(at time.Time) string { return at.UTC().Format(http.TimeFormat) }
	tests := []struct {
		name string
		date string
		want time.Duration
	}{
		{"same clock", date(sent), 0}, // 16:00:00 at 16:00:00.3
		{"the second before", date(sent.Add(-time.Second)), -300 * time.Millisecond}, // 15:59:59.99 at most, by 16:00:00.3: at least that behind
		{"the second after", date(sent.Add(time.Second)), 650 * time.Millisecond},    // 16:00:01 by 16:00:00.35: at least that ahead
		{"server 10 s ahead", date(sent.Add(10 * time.Second)), 10*time.Second - 350*time.Millisecond},
		{"server 10 s behind", date(sent.Add(-10 * time.Second)), -10*time.Second + 700*time.Millisecond},
		{"no Date", "", 0},
		{"garbage", "yesterday", 0},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, kube.ClockOffset(tc.date, sent, got), tc.name)
	}
}

// kubectl delete --force removes this pod from the API at once, and a
// StatefulSet creates a new one in its name while this one still drains:
// the pod read under the name was the new one, whose state is not this
// pod's (no deletionTimestamp read as "not terminating", or its own
// deletion tightening this pod's budget). A UID other than this pod's is
// ErrPodReplaced.
func TestDeletionOfAPodReplacedUnderItsNameIsNotThisPods(t *testing.T) {
	t.Run("UID from the Downward API", func(t *testing.T) {
		_, cfg := newAPIServer(t, podJSON(t, nil)) // the new pod: not terminating
		cfg.UID = "8d3c2f1e-0000-4000-8000-00000000000f"
		_, err := newPod(t, cfg, testPod).Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrPodReplaced)
		assert.NotErrorIs(t, err, kube.ErrNotTerminating)
	})
	t.Run("UID learned from the first read", func(t *testing.T) {
		first := time.Now().Add(30 * time.Second).Truncate(time.Second)
		var mu sync.Mutex
		serve := podJSON(t, deleted(first, 30))
		a, cfg := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			h := serve
			mu.Unlock()
			h(w, r)
		})
		p := newPod(t, cfg, testPod)
		d, err := p.Deletion(t.Context())
		require.NoError(t, err)
		require.True(t, first.Equal(d.Timestamp))

		mu.Lock() // force-deleted, and created again: being deleted in its turn, sooner
		serve = podJSON(t, func(pod *corev1.Pod) {
			pod.UID = "8d3c2f1e-0000-4000-8000-000000000002"
			deleted(first.Add(-20*time.Second), 5)(pod)
		})
		mu.Unlock()
		b, err := deadline.New(time.Hour, deadline.Config{})
		require.NoError(t, err)
		b.OnPreStop(time.Now())
		kill := b.Kill()
		changed, err := p.Tighten(t.Context(), b)
		require.ErrorIs(t, err, kube.ErrPodReplaced)
		assert.False(t, changed)
		assert.Equal(t, kill, b.Kill(), "the other pod's deletion is not this one's")

		p.Record(kube.Event{Reason: "DrainFinished"})
		p.Flush(t.Context())
		require.Len(t, a.posted(), 1)
		assert.Equal(t, "8d3c2f1e-0000-4000-8000-000000000001", string(a.posted()[0].Regarding.UID), "events name this pod")
	})
}

// net/http follows a redirect to an http:// URL of the same host with the
// request's Authorization header: a 3xx from whatever answered with a
// certificate of the cluster's CA sent the service account's token in
// clear. The reader follows no redirect: the 3xx is an *APIError. So with
// a Config.Client of the caller's, which follows redirects as net/http's
// does (the package's guarantee is that no redirect is followed; before,
// only the Pod's own client kept it, and this one's sent the token to the
// plain server, the pod it served taken).
func TestRedirectIsNotFollowedWithTheToken(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(map[bool]string{true: "the Pod's own client", false: "Config.Client"}[own], func(t *testing.T) {
			var mu sync.Mutex
			var leaked []string
			plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				leaked = append(leaked, r.Header.Get("Authorization"))
				mu.Unlock()
				podJSON(t, deleted(time.Now().Add(30*time.Second), 30))(w, r)
			}))
			defer plain.Close()
			a, cfg := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, plain.URL+r.URL.Path, http.StatusFound)
			})
			var client *http.Client
			if !own {
				client = a.Client()
				cfg.CAFile, cfg.Client = "", client
			}
			_, err := newPod(t, cfg, testPod).Deletion(t.Context())
			var apiErr *kube.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, http.StatusFound, apiErr.StatusCode)
			mu.Lock()
			defer mu.Unlock()
			assert.Empty(t, leaked, "the token went to %s in clear", plain.URL)
			if client != nil {
				assert.Nil(t, client.CheckRedirect, "the caller's client is not changed")
			}
		})
	}
}

// Fault: a zero kube.Pod (not made by New) panicked with a nil dereference
// in Deletion, DeletionTimestamp, Tighten and Record, where a nil *Pod
// (New failed: no API access) returned "kube: Pod is nil" or did nothing;
// and its Grace failed reading a token file named "". A Pod not made by New,
// zero or nil, now sends no request: its reads return "kube: Pod not made
// by kube.New", Record does nothing, Flush returns zero counts.
// docs/faults.md row 242.
func TestPodNotMadeByNewSendsNothingAndSaysSo(t *testing.T) {
	const want = "kube: Pod not made by kube.New"
	b, err := deadline.New(30*time.Second, deadline.Config{})
	require.NoError(t, err)
	for name, p := range map[string]*kube.Pod{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			_, err := p.Deletion(t.Context())
			require.EqualError(t, err, want)
			_, err = p.DeletionTimestamp(t.Context())
			require.EqualError(t, err, want)
			_, err = p.Grace(t.Context())
			require.EqualError(t, err, want)
			moved, err := p.Tighten(t.Context(), b)
			require.EqualError(t, err, want)
			assert.False(t, moved)
			p.Record(kube.Event{Reason: "DrainStarted"})
			assert.Equal(t, kube.EventStats{}, p.Flush(t.Context()))
			assert.Empty(t, p.Name())
			assert.Empty(t, p.Namespace())
		})
	}
}

// The API server keeps any non-negative terminationGracePeriodSeconds; one
// past 292 years in seconds is more than a time.Duration holds, and Grace
// refuses it. Its error said the field was "missing or not positive", which
// sent the operator looking for a field that is there and positive; it now
// says what the value is and why it is refused.
func TestGraceNamesWhatIsWrongWithTheSpec(t *testing.T) {
	for _, tc := range []struct {
		seconds int64
		want    string
	}{
		{9223372037, "spec.terminationGracePeriodSeconds is 9223372037, more than a time.Duration holds"},
		{math.MaxInt64, "spec.terminationGracePeriodSeconds is 9223372036854775807, more than a time.Duration holds"},
	} {
		_, cfg := newAPIServer(t, podJSON(t, func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = new(tc.seconds) }))
		_, err := newPod(t, cfg, testPod).Grace(t.Context())
		assert.ErrorContains(t, err, tc.want)
	}
}

// The API server keeps a terminationGracePeriodSeconds of 0, and the
// kubelet gives such a pod 1 s (calculateEffectiveGracePeriod): Grace
// refused it, "missing or not positive", and a server sized by it could
// not start. A negative one, which the API server refuses, still is.
func TestAZeroGraceIsTheKubeletsOneSecond(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = new(int64(0)) }))
	g, err := newPod(t, cfg, testPod).Grace(t.Context())
	require.NoError(t, err)
	assert.Equal(t, time.Second, g)

	_, cfg = newAPIServer(t, podJSON(t, func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = new(int64(-1)) }))
	_, err = newPod(t, cfg, testPod).Grace(t.Context())
	assert.ErrorContains(t, err, "spec.terminationGracePeriodSeconds is missing or negative")
}

func TestPreStopSleepsReadsEachContainersHook(t *testing.T) {
	_, cfg := newAPIServer(t, podJSON(t, func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{
			{Name: "server", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}},
			{Name: "sidecar", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}},
			{Name: "plain"},
		}
	}))
	sleeps, err := newPod(t, cfg, testPod).PreStopSleeps(t.Context())
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Duration{"server": 5 * time.Second, "sidecar": 0, "plain": 0}, sleeps)

	_, cfg = newAPIServer(t, podJSON(t, func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Name: "server", Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: -1}}}}}
	}))
	_, err = newPod(t, cfg, testPod).PreStopSleeps(t.Context())
	assert.ErrorContains(t, err, "container server: lifecycle.preStop.sleep.seconds is -1")

	refusedAndUnmade(t, func(p *kube.Pod) error { _, err := p.PreStopSleeps(t.Context()); return err })
}

// Row 3840: a native sidecar's sleep is read as the containers' are (the
// kubelet runs it); an init container that ran to its end has none left.
func TestPreStopSleepsReadsANativeSidecarsHook(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	sleep := &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 7}}}
	_, cfg := newAPIServer(t, podJSON(t, func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Lifecycle: sleep}, {Name: "server", RestartPolicy: &always, Lifecycle: sleep}}
		p.Spec.Containers = []corev1.Container{{Name: "app"}}
	}))
	sleeps, err := newPod(t, cfg, testPod).PreStopSleeps(t.Context())
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Duration{"app": 0, "server": 7 * time.Second}, sleeps)
}

// A drain with no preStop call reads the pod every second: a clock offset
// is logged at Warn once, not at every read (a review: 13 Warn lines in a
// 12 s drain), and again only when it moves.
func TestClockOffsetIsLoggedOncePerOffset(t *testing.T) {
	var logs bytes.Buffer
	skew := 5 * time.Minute
	_, cfg := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) { skewedPod(t, skew, 30)(w, r) })
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	p := newPod(t, cfg, testPod)
	for range 5 {
		_, err := p.Deletion(t.Context())
		require.NoError(t, err)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "the API server's clock is not this node's"), logs.String())
	skew = 10 * time.Minute // the node's clock stepped
	_, err := p.Deletion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(logs.String(), "the API server's clock is not this node's"), logs.String())
}
