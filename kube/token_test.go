package kube_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/kube"
)

// jwt is a token shaped as the kubelet's projected service account token,
// with claims as the API server writes them (the signature is not read).
func jwt(t *testing.T, claims map[string]any) string {
	t.Helper()
	body, err := json.Marshal(claims)
	require.NoError(t, err)
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"ES256","kid":"k"}`)) + "." + enc(body) + ".c2ln"
}

// boundTo is the claims of the kubelet's token of the service account
// sandboxd bound to the pod name (UID uid), expiring at exp: its
// kube-api-access volume's, which the API server made for its own audience
// and marked so (warnafter, the 3607 s asked).
func boundTo(name, uid string, exp time.Time) map[string]any {
	return map[string]any{
		"aud": []string{"https://kubernetes.default.svc"}, "exp": exp.Unix(), "iat": time.Now().Unix(),
		"iss": "https://kubernetes.default.svc", "jti": rand.Text(),
		"sub": "system:serviceaccount:" + testNamespace + ":sandboxd",
		"kubernetes.io": map[string]any{
			"namespace":      testNamespace,
			"pod":            map[string]any{"name": name, "uid": uid},
			"serviceaccount": map[string]any{"name": "sandboxd", "uid": "sa-uid"},
			"warnafter":      time.Now().Add(3607 * time.Second).Unix(),
		},
	}
}

// ofAudience is the claims of a token bound to the pod name (UID uid) as
// a serviceAccountToken volume of its own holds one: of the audiences aud
// and not the kubelet's 3607 s, so without warnafter.
func ofAudience(name, uid string, aud ...string) map[string]any {
	c := boundTo(name, uid, time.Now().Add(time.Hour))
	c["aud"] = aud
	delete(c["kubernetes.io"].(map[string]any), "warnafter")
	return c
}

// In a pod, the reads are made with the pod's own token, bound to it, which
// the API server takes only while the pod is there with its UID: after a
// force deletion, or once another pod has its name, every read is a bare
// 401 (measured on the real kube-apiserver: internal/realapiserver's
// ForceDeletionIsSeenThroughThePodsOwnToken), which IsNotFound took for a
// failed read, so drain never planned the kubelet's 2 s (row 1030), nor
// could it without POD_UID, with the UID in the token (row 1032). Only
// the pod's own token, far from its expiry, says that; every 401 says why
// the token was refused as far as it shows.
func TestRefusedTokenSaysWhyAndOnlyThePodsOwnIsItsRemoval(t *testing.T) {
	const uid = "8d3c2f1e-0000-4000-8000-000000000001"
	year := time.Now().Add(365 * 24 * time.Hour)
	noPod := boundTo(testPod, uid, year)
	delete(noPod["kubernetes.io"].(map[string]any), "pod")
	tests := []struct {
		name      string
		token     string
		configUID string
		gone      bool
		says      string
	}{
		{"the pod's own", jwt(t, boundTo(testPod, uid, year)), uid, true,
			"the pod's own service account token, bound to its UID " + uid + ", was refused: the API server no longer has this pod"},
		{"the pod's own, its UID not known yet", jwt(t, boundTo(testPod, uid, year)), "", true, "no longer has this pod"},
		{"bound to another UID", jwt(t, boundTo(testPod, "uid-of-another", year)), uid, false,
			"it is bound to the pod agentenv/" + testPod + " (UID uid-of-another), not this pod"},
		{"bound to another pod", jwt(t, boundTo("someone-else", uid, year)), uid, false, "bound to the pod agentenv/someone-else"},
		{"expired", jwt(t, boundTo(testPod, uid, time.Now().Add(-time.Hour))), uid, false, "it expires at"},
		{"about to expire", jwt(t, boundTo(testPod, uid, time.Now().Add(30*time.Second))), uid, false, "it expires at"},
		{"bound to no pod", jwt(t, noPod), uid, false, "a token bound to no pod"},
		{"not a JWT", "token-2", uid, false, "not a token this API server takes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, cfg := newAPIServer(t, podJSON(t, nil)) // takes only token-1
			require.NoError(t, os.WriteFile(cfg.TokenFile, []byte(tc.token+"\n"), 0o600))
			cfg.UID = tc.configUID
			p := newPod(t, cfg, testPod)
			_, err := p.Deletion(t.Context())
			var apiErr *kube.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
			assert.Equal(t, tc.gone, kube.IsNotFound(err), "%v", err)
			assert.Contains(t, err.Error(), tc.says)
			assert.Contains(t, err.Error(), "401 Unauthorized: Unauthorized")
			if tc.gone {
				assert.ErrorIs(t, p.Identity().Mismatch, err, "a first read that finds the pod gone, as a 404")
				assert.Equal(t, uid, p.UID(), "the token's, which the kubelet bound to this pod")
			} else {
				assert.Contains(t, err.Error(), cfg.TokenFile, "names the file")
			}

			// An event refused the same says it too.
			p.Record(kube.Event{Reason: "DrainStarted"})
			assert.Contains(t, p.Flush(t.Context()).LastError, tc.says)
		})
	}
	var apiErr error = &kube.APIError{StatusCode: http.StatusUnauthorized}
	assert.False(t, kube.IsNotFound(apiErr), "a 401 made by hand is not the pod's removal")
}

// The API server refuses a pod's token a minute past its deletionTimestamp
// too, while the kubelet may give the pod longer: a second, shorter
// deletion moves the timestamp but not the kubelet's grace, and a kubelet
// restarted gives the grace again. A 401 once a read found the timestamp a
// minute past is not the pod's removal, which drain would plan 2 s for;
// one a read found still ahead is (a force deletion after a graceful one).
func TestRefusalAMinutePastTheDeletionIsNotTheRemoval(t *testing.T) {
	const uid = "8d3c2f1e-0000-4000-8000-000000000001" // podJSON's
	refuse := func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
	}
	for _, tc := range []struct {
		name string
		past time.Duration // how long ago the deletionTimestamp read was, at the refusal
		gone bool
	}{
		{"a minute past", 61 * time.Second, false},
		{"well past", time.Hour, false},
		{"just past", 10 * time.Second, true},
		{"ahead", -30 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				deletion := time.Now().Add(time.Minute).Truncate(time.Second) // read a minute before it
				cfg := inMemory(t, &inOrder{handlers: []http.HandlerFunc{podJSON(t, deleted(deletion, 600)), refuse}})
				require.NoError(t, os.WriteFile(cfg.TokenFile, []byte(jwt(t, boundTo(testPod, uid, time.Now().Add(24*time.Hour)))), 0o600))
				cfg.UID = uid
				p := newPod(t, cfg, testPod)
				d, err := p.Deletion(t.Context())
				require.NoError(t, err)
				require.True(t, d.Timestamp.Equal(deletion))

				time.Sleep(time.Until(deletion.Add(tc.past))) // virtual time
				_, err = p.Deletion(t.Context())
				var apiErr *kube.APIError
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
				assert.Equal(t, tc.gone, kube.IsNotFound(err), "%v", err)
				if !tc.gone {
					assert.Contains(t, err.Error(), "deletionTimestamp "+deletion.UTC().Format(time.RFC3339)+" is a minute past")
				}
			})
		})
	}
}

// The API server answers a token of an audience it does not take (a
// serviceAccountToken volume of another service's audience mounted where
// the reads take their token) with the same bare 401 as the token of a pod
// removed, at every read, the one at start too (measured on the real
// kube-apiserver v1.34.4: internal/realapiserver's
// TokenOfAnotherAudienceIsNotThePodsRemoval), and every 401 to the pod's
// own token was its removal: drain planned SIGKILL 2 s after SIGTERM for
// a pod the kubelet gives its whole grace (row 1110). A 401 is the
// removal only for a token whose audience the API server took: one of
// the same binding an earlier answer took (a read, an Event), or one the
// API server marked as made for its own audiences (the kubelet's).
func TestRefusalOfATokenNoReadTookIsNotTheRemoval(t *testing.T) {
	const uid = "8d3c2f1e-0000-4000-8000-000000000001" // podJSON's
	refuse := func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
	}
	unavailable := func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "apiserver is shutting down")
	}
	api := "https://kubernetes.default.svc"
	tests := []struct {
		name    string
		first   http.HandlerFunc // the answer to the read at start
		start   map[string]any   // the token then
		refused map[string]any   // the token the 401 after it refuses
		gone    bool
		says    string
	}{
		{"another audience, refused at start too", refuse, ofAudience(testPod, uid, "vault"), ofAudience(testPod, uid, "vault"), false,
			`audience ["vault"] from this process`},
		{"another audience, no answer at start", unavailable, ofAudience(testPod, uid, api), ofAudience(testPod, uid, api), false,
			"is refused the same as the token of a pod removed"},
		{"the API server's audience, taken at start", podJSON(t, nil), ofAudience(testPod, uid, api), ofAudience(testPod, uid, api), true,
			"no longer has this pod"},
		{"taken at start, then another audience", podJSON(t, nil), ofAudience(testPod, uid, api), ofAudience(testPod, uid, "vault"), false,
			`audience ["vault"] from this process`},
		{"the kubelet's, refused at start", refuse, boundTo(testPod, uid, time.Now().Add(time.Hour)),
			boundTo(testPod, uid, time.Now().Add(time.Hour)), true, "no longer has this pod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := inMemory(t, &inOrder{handlers: []http.HandlerFunc{tc.first, refuse}})
			require.NoError(t, os.WriteFile(cfg.TokenFile, []byte(jwt(t, tc.start)), 0o600))
			cfg.UID = uid
			p := newPod(t, cfg, testPod)
			_, err := p.Spec(t.Context()) // at start, as drain.ConfigFromEnv
			if err != nil {
				// Refused as the later read is, or not answered.
				assert.Equal(t, tc.gone, kube.IsNotFound(err), "the read at start: %v", err)
			}

			// A new token, as the kubelet's rotation writes one.
			require.NoError(t, os.WriteFile(cfg.TokenFile, []byte(jwt(t, tc.refused)), 0o600))
			_, err = p.Deletion(t.Context())
			var apiErr *kube.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
			assert.Equal(t, tc.gone, kube.IsNotFound(err), "%v", err)
			assert.Contains(t, err.Error(), tc.says)
		})
	}
}
