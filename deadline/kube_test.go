package deadline_test

import (
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
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/deadline"
)

const (
	testNamespace = "agentenv"
	testPod       = "agentenv-node-x7k2p"
	testPodPath   = "/api/v1/namespaces/agentenv/pods/agentenv-node-x7k2p"
)

// apiServer is a TLS API server on loopback that serves one pod.
type apiServer struct {
	*httptest.Server
	mu     sync.Mutex
	token  string   // the token it accepts
	tokens []string // the tokens it was sent
	serve  http.HandlerFunc
}

func newAPIServer(t *testing.T, serve http.HandlerFunc) (*apiServer, *deadline.PodReader) {
	t.Helper()
	a := &apiServer{token: "token-1", serve: serve}
	a.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		a.mu.Lock()
		a.tokens = append(a.tokens, got)
		ok := got == "Bearer "+a.token
		a.mu.Unlock()
		if !ok {
			writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != testPodPath {
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no route "+r.Method+" "+r.URL.Path)
			return
		}
		a.serve(w, r)
	}))
	a.Config.ErrorLog = log.New(io.Discard, "", 0) // the wrong-CA test makes handshakes fail on purpose
	a.StartTLS()                                   // httptest listens on 127.0.0.1
	require.Contains(t, a.URL, "https://127.0.0.1:")
	t.Cleanup(a.Close)

	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	writePEM(t, caFile, a.Certificate().Raw)
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("token-1\n"), 0o600))
	return a, &deadline.PodReader{Host: a.URL, TokenFile: tokenFile, CAFile: caFile, Namespace: testNamespace, Name: testPod}
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

func TestPodReaderReadsDeletionTimestamp(t *testing.T) {
	kill := time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC)
	_, r := newAPIServer(t, podJSON(t, deleted(kill, 30)))
	d, err := r.Deletion(t.Context())
	require.NoError(t, err)
	assert.True(t, kill.Equal(d.Timestamp), "got %v", d.Timestamp)
	assert.Equal(t, 30*time.Second, d.GracePeriod)

	ts, err := r.DeletionTimestamp(t.Context())
	require.NoError(t, err)
	assert.True(t, kill.Equal(ts))
}

func TestPodReaderSecondPrecisionFromTheAPIServer(t *testing.T) {
	// metav1.Time drops fractions of a second, so the reader sees the kill
	// time up to 1 s early.
	kill := time.Date(2026, 11, 30, 3, 30, 0, 900_000_000, time.UTC)
	_, r := newAPIServer(t, podJSON(t, deleted(kill, 30)))
	ts, err := r.DeletionTimestamp(t.Context())
	require.NoError(t, err)
	assert.True(t, kill.Truncate(time.Second).Equal(ts), "got %v", ts)
}

func TestPodReaderNotTerminatingYet(t *testing.T) {
	_, r := newAPIServer(t, podJSON(t, nil))
	_, err := r.DeletionTimestamp(t.Context())
	assert.ErrorIs(t, err, deadline.ErrNotTerminating)
}

func TestPodReaderAPIErrors(t *testing.T) {
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
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, `pods "agentenv-node-x7k2p" not found`)
		}, 404, "NotFound", `pods "agentenv-node-x7k2p" not found`},
		{"not a Status body", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "upstream connect error", http.StatusServiceUnavailable)
		}, 503, "", "upstream connect error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, r := newAPIServer(t, tc.serve)
			_, err := r.DeletionTimestamp(t.Context())
			var apiErr *deadline.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, tc.code, apiErr.StatusCode)
			assert.Equal(t, tc.reason, apiErr.Reason)
			assert.Contains(t, err.Error(), tc.contains)
			assert.NotErrorIs(t, err, deadline.ErrNotTerminating)
		})
	}
}

func TestPodReaderNotFoundForAnotherName(t *testing.T) {
	_, r := newAPIServer(t, podJSON(t, deleted(time.Now(), 30)))
	r.Name = "someone-else"
	_, err := r.DeletionTimestamp(t.Context())
	var apiErr *deadline.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
}

func TestPodReaderMalformedResponses(t *testing.T) {
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
			_, r := newAPIServer(t, tc.serve)
			_, err := r.DeletionTimestamp(t.Context())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.contains)
			assert.NotErrorIs(t, err, deadline.ErrNotTerminating)
		})
	}
}

func TestPodReaderSlowServerBoundedByContext(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	cancelled := make(chan struct{})
	_, r := newAPIServer(t, func(w http.ResponseWriter, req *http.Request) {
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

func TestPodReaderRejectsWrongCA(t *testing.T) {
	a, r := newAPIServer(t, podJSON(t, deleted(time.Now(), 30)))
	writePEM(t, r.CAFile, selfSignedCA(t))
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

func TestPodReaderRereadsRotatedToken(t *testing.T) {
	a, r := newAPIServer(t, podJSON(t, deleted(time.Now(), 30)))
	_, err := r.DeletionTimestamp(t.Context())
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(r.TokenFile, []byte("token-2"), 0o600))
	a.mu.Lock()
	a.token = "token-2"
	a.mu.Unlock()
	_, err = r.DeletionTimestamp(t.Context())
	require.NoError(t, err)
	a.mu.Lock()
	defer a.mu.Unlock()
	assert.Equal(t, []string{"Bearer token-1", "Bearer token-2"}, a.tokens)
}

func TestPodReaderWithOwnClient(t *testing.T) {
	a, r := newAPIServer(t, podJSON(t, deleted(time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC), 60)))
	r.CAFile = ""
	r.Client = a.Client()
	d, err := r.Deletion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, time.Minute, d.GracePeriod)
}

func TestPodReaderBadConfigNamesTheField(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("t"), 0o600))
	emptyToken := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(emptyToken, nil, 0o600))
	notPEM := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	ok := deadline.PodReader{Host: "https://127.0.0.1:1", TokenFile: token, CAFile: notPEM, Namespace: "ns", Name: "pod"}
	tests := []struct {
		name     string
		mutate   func(*deadline.PodReader)
		contains []string
	}{
		{"everything missing", func(r *deadline.PodReader) { *r = deadline.PodReader{} },
			[]string{"Host", "TokenFile", "Namespace", "Name", "CAFile"}},
		{"plain http", func(r *deadline.PodReader) { r.Host = "http://10.96.0.1:443" }, []string{"Host", "https"}},
		{"token file missing", func(r *deadline.PodReader) { r.TokenFile = filepath.Join(dir, "nope") }, []string{"token file", "nope"}},
		{"token file empty", func(r *deadline.PodReader) { r.TokenFile = emptyToken }, []string{"token file", "empty"}},
		{"CA not PEM", func(r *deadline.PodReader) {}, []string{"CA file", "no PEM"}},
	}
	for _, tc := range tests {
		r := ok
		tc.mutate(&r)
		_, err := r.DeletionTimestamp(t.Context())
		require.Error(t, err, tc.name)
		for _, c := range tc.contains {
			assert.Contains(t, err.Error(), c, tc.name)
		}
	}
	var nilReader *deadline.PodReader
	_, err := nilReader.DeletionTimestamp(t.Context())
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

func TestInClusterPodReader(t *testing.T) {
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: selfSignedCA(t)}))
	dir := serviceAccountDir(t, map[string]string{"token": "abc\n", "ca.crt": ca, "namespace": "agentenv\n"})
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
	r, err := deadline.InClusterPodReaderFrom(testPod, func(k string) string { return env[k] }, dir)
	require.NoError(t, err)
	assert.Equal(t, deadline.PodReader{
		Host: "https://10.96.0.1:443", TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt"),
		Namespace: "agentenv", Name: testPod,
	}, *r)

	env["KUBERNETES_SERVICE_HOST"] = "fd00::1"
	r, err = deadline.InClusterPodReaderFrom(testPod, func(k string) string { return env[k] }, dir)
	require.NoError(t, err)
	assert.Equal(t, "https://[fd00::1]:443", r.Host)
}

func TestInClusterPodReaderNamesEverythingMissing(t *testing.T) {
	dir := serviceAccountDir(t, map[string]string{"ca.crt": "garbage", "namespace": " \n"})
	_, err := deadline.InClusterPodReaderFrom("", func(string) string { return "" }, dir)
	require.Error(t, err)
	for _, want := range []string{"name", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "token file", "CA file", "namespace file"} {
		assert.Contains(t, err.Error(), want)
	}
	// Outside a cluster, the real one fails the same way.
	if _, statErr := os.Stat(deadline.ServiceAccountDir); errors.Is(statErr, os.ErrNotExist) {
		_, err = deadline.InClusterPodReader(testPod)
		assert.ErrorContains(t, err, "token file")
	}
}

func TestTightenFromPodCutsTheGracePeriod(t *testing.T) {
	// kubectl delete --grace-period=30 during the preStop hook: the API
	// server's deletionTimestamp is 30 s out, the manifest said 3600 s.
	t0 := time.Now()
	kill := t0.Truncate(time.Second).Add(30 * time.Second)
	_, r := newAPIServer(t, podJSON(t, deleted(kill, 30)))
	b, err := deadline.New(3600 * time.Second)
	require.NoError(t, err)
	b.OnPreStop(t0)
	changed, err := b.TightenFromPod(t.Context(), r)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.True(t, kill.Equal(b.Kill()), "kill %v, want %v", b.Kill(), kill)
	// The default margin follows the manifest's grace (3600 s: 5 s), and
	// still fits in the 30 s the deletion left.
	assert.Equal(t, deadline.DefaultMarginFor(3600*time.Second), b.Margin())
	assert.True(t, kill.Add(-b.Margin()).Equal(b.Deadline()), "deadline %v, want %v", b.Deadline(), kill.Add(-b.Margin()))

	changed, err = b.TightenFromPod(t.Context(), r) // the same time again: no change
	require.NoError(t, err)
	assert.False(t, changed)
}

func TestTightenFromPodLeavesBudgetAloneOnError(t *testing.T) {
	_, r := newAPIServer(t, podJSON(t, nil))
	b, err := deadline.New(3600 * time.Second)
	require.NoError(t, err)
	t0 := time.Now()
	b.OnPreStop(t0)
	changed, err := b.TightenFromPod(t.Context(), r)
	assert.ErrorIs(t, err, deadline.ErrNotTerminating)
	assert.False(t, changed)
	assert.Equal(t, t0.Add(3600*time.Second), b.Kill())

	_, err = b.TightenFromPod(t.Context(), nil)
	assert.ErrorContains(t, err, "reader")
}
