package realapiserver

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/drainkit/drainkit/internal/freeport"
)

// Version is the Kubernetes release whose kube-apiserver the tests run:
// the kubelet's (.ci/build-kubelet), from the same module.
const Version = "v1.34.4"

// EnvAPIServer names the kube-apiserver binary to run; unset means
// DefaultAPIServer's path when it exists.
const EnvAPIServer = "DRAINKIT_KUBE_APISERVER"

// The users of the cluster's static token file.
const (
	AdminToken = "admin-token"  // user "admin", group system:masters
	PodToken   = "pod-token"    // user PodUser: what the tests bind roles to
	PodUser    = "drainkit-pod" // stands in for the pod's service account
	NoneToken  = "none-token"   // user "nobody", bound to nothing: every request is 403
)

// DefaultAPIServer is where .ci/build-kube-apiserver caches the binary:
// under /var/cache/drainkit as root, else under $HOME/.cache/drainkit.
func DefaultAPIServer() string {
	if os.Geteuid() == 0 {
		return "/var/cache/drainkit/kube-apiserver-" + Version + "/kube-apiserver"
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache/drainkit/kube-apiserver-"+Version+"/kube-apiserver")
}

// A Cluster is etcd and a kube-apiserver on loopback, everything in a
// temporary directory: its own CA and serving certificate, a service
// account signing key, a static token file, RBAC authorization. No
// controller-manager, scheduler or kubelet run: a pod bound to a node that
// does not exist stays, deleted, with its deletionTimestamp.
type Cluster struct {
	URL    string // https://127.0.0.1:port
	CAFile string // the CA the serving certificate chains to
	Dir    string
	client *http.Client
	server *os.Process // the kube-apiserver's
	etcd   *os.Process
}

// Require returns the path of the kube-apiserver and of etcd, or skips the
// test naming what is missing — and fails it instead under CI=true, as
// every real part does. CI builds the kube-apiserver after the kubelet
// (.ci/build-kube-apiserver) where it can set transparent huge pages, and
// runs these tests after the real-kubelet suite; elsewhere .ci/run leaves
// them out by name (-skip RealAPIServer), and a developer runs them after
// .ci/build-kube-apiserver.
func Require(t *testing.T) (apiserver, etcd string) {
	t.Helper()
	if testing.Short() {
		t.Skip("realapiserver: etcd and a kube-apiserver: not in -short mode")
	}
	apiserver = os.Getenv(EnvAPIServer)
	if apiserver == "" {
		apiserver = DefaultAPIServer()
	}
	if _, err := os.Stat(apiserver); err != nil {
		missing(t, "realapiserver: no kube-apiserver at %s (build it with .ci/build-kube-apiserver, or set %s): %v",
			apiserver, EnvAPIServer, err)
	}
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		missing(t, "realapiserver: no etcd in PATH (apt-get install etcd-server): %v", err)
	}
	return apiserver, etcd
}

// missing skips the test with the message, or fails it under CI=true.
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// Start starts etcd and the kube-apiserver and returns once the API server
// is ready. Both are stopped and their directory removed when the test
// ends. flags are kube-apiserver flags added to the cluster's own, for
// example "--goaway-chance=0.02".
func Start(t *testing.T, flags ...string) *Cluster {
	t.Helper()
	apiserver, etcd := Require(t)
	dir := t.TempDir()
	c := &Cluster{Dir: dir, CAFile: filepath.Join(dir, "ca.crt")}
	certFile, keyFile := writeCerts(t, dir)
	saKey := filepath.Join(dir, "sa.key")
	writeKey(t, saKey, newKey(t))
	tokens := filepath.Join(dir, "tokens.csv")
	must(t, os.WriteFile(tokens, []byte(fmt.Sprintf("%s,admin,uid-admin,\"system:masters\"\n%s,%s,uid-pod\n%s,nobody,uid-nobody\n",
		AdminToken, PodToken, PodUser, NoneToken)), 0o600))

	clientPort, peerPort, apiPort := freePort(t), freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + clientPort
	peerURL := "http://127.0.0.1:" + peerPort
	c.etcd = start(t, dir, "etcd", etcd,
		"--data-dir="+filepath.Join(dir, "etcd"), "--name=default",
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL, "--log-level=warn")
	c.server = start(t, dir, "kube-apiserver", apiserver, append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + apiPort,
		"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile, "--cert-dir=" + filepath.Join(dir, "certs"),
		"--client-ca-file=" + c.CAFile,
		"--token-auth-file=" + tokens, "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + saKey, "--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--enable-priority-and-fairness=false", "--profiling=false"}, flags...)...)

	pool := x509.NewCertPool()
	ca, err := os.ReadFile(c.CAFile)
	must(t, err)
	pool.AppendCertsFromPEM(ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	c.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	c.URL = "https://127.0.0.1:" + apiPort
	c.waitReady(t)
	return c
}

// waitReady polls /readyz until the API server says ok. The bound is a
// hang detector: a cold start takes 5-20 s on a loaded 2-core machine.
func (c *Cluster) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		code, body, err := c.Do(AdminToken, http.MethodGet, "/readyz", nil)
		if err == nil && code == http.StatusOK {
			return
		}
		last = fmt.Sprintf("%d %s %v", code, body, err)
		time.Sleep(200 * time.Millisecond) // polling a process we do not control
	}
	t.Fatalf("realapiserver: the kube-apiserver is not ready after 3 minutes: %s; its log is in %s", last, c.Dir)
}

// Do sends one request as the user of token and returns the status and
// body. A body that is not []byte is sent as JSON.
func (c *Cluster) Do(token, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(body); err != nil {
				return 0, nil, err
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return resp.StatusCode, got, err
}

// MustDo is Do as admin, failing the test unless the status is want; it
// decodes the answer into out when out is not nil.
func (c *Cluster) MustDo(t *testing.T, method, path string, body any, want int, out any) {
	t.Helper()
	code, got, err := c.Do(AdminToken, method, path, body)
	if err != nil || code != want {
		t.Fatalf("%s %s: %d %s %v (want %d)", method, path, code, got, err, want)
	}
	if out != nil {
		if err := json.Unmarshal(got, out); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, path, got, err)
		}
	}
}

// ApplyRBAC creates, in namespace ns, the ServiceAccount, Role and
// RoleBinding of manifest, a file of YAML documents separated by "---"
// lines such as examples/sandboxd/deploy/rbac.yaml, their namespace (and
// that of the binding's subjects) changed to ns and nothing else, so that
// a test proves the example's rules are enough. It returns the Role's
// name, and fails the test when manifest holds no Role or the API server
// refuses a document.
func (c *Cluster) ApplyRBAC(t *testing.T, manifest, ns string) (role string) {
	t.Helper()
	data, err := os.ReadFile(manifest)
	must(t, err)
	decode := func(doc string, kind string, into any) {
		t.Helper()
		if err := yaml.Unmarshal([]byte(doc), into); err != nil {
			t.Fatalf("realapiserver: %s: a %s: %v", manifest, kind, err)
		}
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		decode(doc, "document", &meta)
		switch meta.Kind {
		case "ServiceAccount":
			var sa corev1.ServiceAccount
			decode(doc, meta.Kind, &sa)
			sa.Namespace = ns
			c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+ns+"/serviceaccounts", &sa, http.StatusCreated, nil)
		case "Role":
			var r rbacv1.Role
			decode(doc, meta.Kind, &r)
			r.Namespace, role = ns, r.Name
			c.MustDo(t, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/roles", &r, http.StatusCreated, nil)
		case "RoleBinding":
			var rb rbacv1.RoleBinding
			decode(doc, meta.Kind, &rb)
			rb.Namespace = ns
			for i := range rb.Subjects {
				rb.Subjects[i].Namespace = ns
			}
			c.MustDo(t, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/namespaces/"+ns+"/rolebindings", &rb, http.StatusCreated, nil)
		}
	}
	if role == "" {
		t.Fatalf("realapiserver: no Role in %s", manifest)
	}
	return role
}

// PublishRootCA creates the ConfigMap kube-root-ca.crt in namespace ns,
// its ca.crt the cluster's CA, as the kube-controller-manager's root CA
// publisher does in every namespace (no controller-manager runs here):
// the kubelet fills a pod's kube-api-access volume's ca.crt from it, and
// a pod that mounts its service account does not start without it.
func (c *Cluster) PublishRootCA(t *testing.T, ns string) {
	t.Helper()
	ca, err := os.ReadFile(c.CAFile)
	must(t, err)
	c.MustDo(t, http.MethodPost, "/api/v1/namespaces/"+ns+"/configmaps", &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: ns},
		Data:       map[string]string{"ca.crt": string(ca)},
	}, http.StatusCreated, nil)
}

// TokenFile writes token to a file in the cluster's directory, as the
// kubelet mounts a service account token, and returns its path.
func (c *Cluster) TokenFile(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(c.Dir, "token-"+strings.SplitN(token, "-", 2)[0])
	must(t, os.WriteFile(path, []byte(token+"\n"), 0o600))
	return path
}

// start runs a server process whose output goes to dir/name.log, and stops
// it (SIGTERM, then SIGKILL after 10 s) when the test ends.
func start(t *testing.T, dir, name, bin string, args ...string) *os.Process {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	must(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	neverOutliveTheTest(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		t.Fatalf("realapiserver: starting %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		continueStalled(cmd.Process) // a Stall ended with the test
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("%s log (last 4 KiB):\n%s", name, b[max(0, len(b)-4096):])
			}
		}
	})
	return cmd.Process
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	must(t, err)
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// writeCerts makes a CA and a serving certificate for 127.0.0.1 signed by
// it; it writes dir/ca.crt and returns the serving pair's files.
func writeCerts(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	caKey := newKey(t)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "realapiserver CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	must(t, err)
	writePEM(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE", caDER)

	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	must(t, err)
	certFile, keyFile = filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writeKey(t, keyFile, key)
	return certFile, keyFile
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	return key
}

func writeKey(t *testing.T, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	writePEM(t, path, "EC PRIVATE KEY", der)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	must(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
