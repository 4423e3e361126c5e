package deadline

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the OpenTelemetry instrumentation scope of this package.
const ScopeName = "github.com/drainkit/drainkit/deadline"

// ServiceAccountDir is where Kubernetes mounts a pod's service account:
// the files token, ca.crt and namespace.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// maxPodBytes bounds how much of a response PodReader reads; a Pod object
// with managed fields is tens of kilobytes.
const maxPodBytes = 4 << 20

// A PodReader reads one pod's deletion state from the Kubernetes API server
// with a plain HTTPS GET /api/v1/namespaces/{Namespace}/pods/{Name},
// authenticated by a service account token. It is how a server learns that
// its grace period was cut (kubectl delete --grace-period=30, an eviction)
// below the value in its manifest.
//
// The pod's service account needs RBAC permission to get its own pod
// (apiGroups: [""], resources: ["pods"], verbs: ["get"]); without it every
// read fails with an *APIError with StatusCode 403.
//
// Build one with InClusterPodReader, or fill the fields (tests, out of
// cluster). A PodReader holds no state besides its fields and is safe for
// concurrent use.
type PodReader struct {
	// Host is the API server's base URL, for example
	// "https://10.96.0.1:443". It must use https.
	Host string
	// TokenFile holds the bearer token. It is read on every request,
	// because the kubelet rotates projected service account tokens.
	TokenFile string
	// CAFile holds the PEM certificates the API server's certificate must
	// chain to. It is read on every request, and used only when Client is
	// nil.
	CAFile string
	// Namespace and Name identify the pod.
	Namespace string
	Name      string
	// Client sends the requests. If nil, each request uses a fresh
	// connection that trusts only the certificates in CAFile, uses no proxy,
	// and is closed afterwards (a terminating pod reads its deletion state
	// once or twice; there is nothing to keep alive).
	Client *http.Client
	// TracerProvider traces every read as a client span named
	// "deadline.PodReader.Deletion" under ScopeName. Nil means
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// PodDeletion is what the API server recorded when the pod was deleted.
type PodDeletion struct {
	// Timestamp is metadata.deletionTimestamp: the deletion request time
	// plus the grace period, the time the kubelet will SIGKILL the pod. The
	// API server stores it with whole-second precision, so it reads up to
	// 1 s early; Budget.Tighten therefore errs on the safe side.
	Timestamp time.Time
	// GracePeriod is metadata.deletionGracePeriodSeconds: the grace period
	// the deletion asked for, which the kubelet uses instead of the
	// manifest's terminationGracePeriodSeconds. Zero if the field is absent.
	GracePeriod time.Duration
}

// APIError is a response from the API server other than 200 OK. Message
// and Reason come from the metav1.Status body when there is one.
type APIError struct {
	StatusCode int    // HTTP status, e.g. 403 or 404
	Reason     string // Status.reason, e.g. "Forbidden", "NotFound"
	Message    string // Status.message, or the start of the body
}

// Error says which status the API server answered and why.
func (e *APIError) Error() string {
	msg := fmt.Sprintf("deadline: kubernetes API: %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.StatusCode == http.StatusForbidden {
		msg += ` (the pod's service account needs RBAC "get" on "pods")`
	}
	return msg
}

// InClusterPodReader returns a PodReader for the pod called name, using the
// service account Kubernetes mounts into every pod: the API server address
// from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, and the token,
// ca.crt and namespace files in ServiceAccountDir. Pass the pod's name via
// the Downward API (env POD_NAME from fieldRef metadata.name).
//
// It fails, naming every missing or unusable piece, if name is empty, an
// environment variable is unset, or a file is missing, empty or (ca.crt)
// holds no PEM certificate. It sends no request.
func InClusterPodReader(name string) (*PodReader, error) {
	return inClusterPodReader(name, os.Getenv, ServiceAccountDir)
}

func inClusterPodReader(name string, getenv func(string) string, dir string) (*PodReader, error) {
	var errs []error
	if name == "" {
		errs = append(errs, errors.New("name: pod name must not be empty (set it from the Downward API, fieldRef metadata.name)"))
	}
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" {
		errs = append(errs, errors.New("KUBERNETES_SERVICE_HOST is not set (not running in a pod?)"))
	}
	if port == "" {
		errs = append(errs, errors.New("KUBERNETES_SERVICE_PORT is not set (not running in a pod?)"))
	}
	r := &PodReader{
		Host:      "https://" + net.JoinHostPort(host, port),
		TokenFile: filepath.Join(dir, "token"),
		CAFile:    filepath.Join(dir, "ca.crt"),
		Name:      name,
	}
	if _, err := readToken(r.TokenFile); err != nil {
		errs = append(errs, err)
	}
	if _, err := loadCA(r.CAFile); err != nil {
		errs = append(errs, err)
	}
	ns, err := os.ReadFile(filepath.Join(dir, "namespace"))
	r.Namespace = strings.TrimSpace(string(ns))
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("namespace file: %w", err))
	case r.Namespace == "":
		errs = append(errs, fmt.Errorf("namespace file %s is empty", filepath.Join(dir, "namespace")))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("deadline: InClusterPodReader: %w", errors.Join(errs...))
	}
	return r, nil
}

// DeletionTimestamp returns the pod's metadata.deletionTimestamp, the
// absolute SIGKILL time. It returns ErrNotTerminating if the pod has none
// yet (it is not being deleted, or it is stopped by graceful node shutdown,
// which does not set one), an *APIError for a non-200 answer, and ctx's
// error if ctx ends first. It returns by ctx's deadline.
func (r *PodReader) DeletionTimestamp(ctx context.Context) (time.Time, error) {
	d, err := r.Deletion(ctx)
	return d.Timestamp, err
}

// Deletion reads the pod and returns its deletion state, with the same
// errors as DeletionTimestamp.
func (r *PodReader) Deletion(ctx context.Context) (PodDeletion, error) {
	if r == nil {
		return PodDeletion{}, errors.New("deadline: PodReader is nil")
	}
	tp := r.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	ctx, span := tp.Tracer(ScopeName).Start(ctx, "deadline.PodReader.Deletion", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("k8s.namespace.name", r.Namespace), attribute.String("k8s.pod.name", r.Name)))
	defer span.End()
	d, err := r.deletion(ctx)
	switch {
	case err == nil:
		span.SetAttributes(attribute.String("k8s.pod.deletion_timestamp", d.Timestamp.UTC().Format(time.RFC3339)),
			attribute.Int64("k8s.pod.deletion_grace_period_seconds", int64(d.GracePeriod/time.Second)))
	case errors.Is(err, ErrNotTerminating):
		span.SetAttributes(attribute.Bool("k8s.pod.terminating", false))
	default:
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			span.SetAttributes(attribute.Int("http.response.status_code", apiErr.StatusCode))
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return d, err
}

func (r *PodReader) deletion(ctx context.Context) (PodDeletion, error) {
	if err := r.validate(); err != nil {
		return PodDeletion{}, err
	}
	token, err := readToken(r.TokenFile)
	if err != nil {
		return PodDeletion{}, fmt.Errorf("deadline: PodReader: %w", err)
	}
	client := r.Client
	if client == nil {
		pool, err := loadCA(r.CAFile)
		if err != nil {
			return PodDeletion{}, fmt.Errorf("deadline: PodReader: %w", err)
		}
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
		defer tr.CloseIdleConnections()
		client = &http.Client{Transport: tr}
	}
	u := strings.TrimSuffix(r.Host, "/") + "/api/v1/namespaces/" + url.PathEscape(r.Namespace) + "/pods/" + url.PathEscape(r.Name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return PodDeletion{}, fmt.Errorf("deadline: PodReader: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return PodDeletion{}, fmt.Errorf("deadline: PodReader: GET pod %s/%s: %w", r.Namespace, r.Name, err)
	}
	defer resp.Body.Close()
	d, err := r.read(resp)
	if err != nil && !errors.Is(err, ErrNotTerminating) && ctx.Err() != nil {
		// The context ended while the answer came in. The transport may
		// still hand over a response that the server cut short when the
		// connection closed; the context is the cause, so report it.
		return PodDeletion{}, fmt.Errorf("deadline: PodReader: GET pod %s/%s: %w (%w)", r.Namespace, r.Name, ctx.Err(), err)
	}
	return d, err
}

// read turns the API server's response into the pod's deletion state.
func (r *PodReader) read(resp *http.Response) (PodDeletion, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPodBytes))
	if err != nil {
		return PodDeletion{}, fmt.Errorf("deadline: PodReader: reading pod %s/%s: %w", r.Namespace, r.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return PodDeletion{}, apiError(resp.StatusCode, body)
	}
	return r.decode(body)
}

// podObject is the part of a v1.Pod that PodReader needs.
type podObject struct {
	Metadata struct {
		Name                       string     `json:"name"`
		Namespace                  string     `json:"namespace"`
		DeletionTimestamp          *time.Time `json:"deletionTimestamp"`
		DeletionGracePeriodSeconds *int64     `json:"deletionGracePeriodSeconds"`
	} `json:"metadata"`
}

func (r *PodReader) decode(body []byte) (PodDeletion, error) {
	var pod podObject
	if err := json.Unmarshal(body, &pod); err != nil {
		return PodDeletion{}, fmt.Errorf("deadline: PodReader: pod %s/%s: malformed response: %w", r.Namespace, r.Name, err)
	}
	if m := pod.Metadata; m.Name != r.Name || (m.Namespace != "" && m.Namespace != r.Namespace) {
		return PodDeletion{}, fmt.Errorf("deadline: PodReader: pod %s/%s: response describes %q in %q, not this pod",
			r.Namespace, r.Name, m.Name, m.Namespace)
	}
	if pod.Metadata.DeletionTimestamp == nil {
		return PodDeletion{}, ErrNotTerminating
	}
	d := PodDeletion{Timestamp: *pod.Metadata.DeletionTimestamp}
	if s := pod.Metadata.DeletionGracePeriodSeconds; s != nil && *s > 0 {
		d.GracePeriod = time.Duration(*s) * time.Second
	}
	return d, nil
}

func apiError(code int, body []byte) *APIError {
	e := &APIError{StatusCode: code}
	var status struct {
		Kind    string `json:"kind"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &status) == nil && status.Kind == "Status" {
		e.Reason, e.Message = status.Reason, status.Message
		return e
	}
	const maxMessage = 256
	e.Message = strings.TrimSpace(string(body[:min(len(body), maxMessage)]))
	return e
}

func (r *PodReader) validate() error {
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"Host", r.Host}, {"TokenFile", r.TokenFile}, {"Namespace", r.Namespace}, {"Name", r.Name},
	} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if r.Client == nil && r.CAFile == "" {
		missing = append(missing, "CAFile (or Client)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("deadline: PodReader: %s must be set", strings.Join(missing, ", "))
	}
	if u, err := url.Parse(r.Host); err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("deadline: PodReader: Host %q must be an https:// URL", r.Host)
	}
	return nil
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return token, nil
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// A DeletionReader reads the pod's metadata.deletionTimestamp, returning
// ErrNotTerminating while there is none. *PodReader is one.
type DeletionReader interface {
	DeletionTimestamp(ctx context.Context) (time.Time, error)
}

// TightenFromPod reads the pod's deletionTimestamp with r and passes it to
// Tighten, reporting whether the budget's SIGKILL moved earlier.
//
// Call it once, right after OnPreStop (or after OnSIGTERM when the server
// does not see the preStop hook start), with a short timeout on ctx: a
// deletion with `kubectl delete --grace-period=30`, or an eviction, gives
// the kubelet a grace period below the manifest's, and only the API server
// knows. If the read fails, the budget is unchanged and the error is
// returned (wrapping ErrNotTerminating when the pod has no
// deletionTimestamp, as under graceful node shutdown); the manifest grace
// then stands, so log the error and go on.
func (b *Budget) TightenFromPod(ctx context.Context, r DeletionReader) (bool, error) {
	if r == nil {
		return false, errors.New("deadline: TightenFromPod: reader must not be nil")
	}
	kill, err := r.DeletionTimestamp(ctx)
	if err != nil {
		return false, err
	}
	return b.Tighten(kill), nil
}
