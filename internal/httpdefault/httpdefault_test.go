package httpdefault_test

import (
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/drainkit/drainkit/internal/httpdefault"
)

func TestTransportKeepsWhatAProgramSetOnTheDefault(t *testing.T) {
	saved := http.DefaultTransport
	t.Cleanup(func() { http.DefaultTransport = saved })
	def := saved.(*http.Transport).Clone()
	def.TLSClientConfig = &tls.Config{ServerName: "set-by-the-program"}
	http.DefaultTransport = def

	tr := httpdefault.Transport()
	if tr == def {
		t.Fatal("Transport returned http.DefaultTransport itself; a change to the copy would change every client of the program")
	}
	if tr.TLSClientConfig == nil || tr.TLSClientConfig.ServerName != "set-by-the-program" {
		t.Fatalf("TLS config %+v: the program's setting on the default was not kept", tr.TLSClientConfig)
	}
}

func TestTransportUnderAWrapperHasNetHTTPsSettings(t *testing.T) {
	saved := http.DefaultTransport
	t.Cleanup(func() { http.DefaultTransport = saved })
	http.DefaultTransport = roundTripFunc(func(*http.Request) (*http.Response, error) {
		t.Error("the wrapper was used")
		return nil, http.ErrNotSupported
	})

	tr := httpdefault.Transport()
	want := saved.(*http.Transport)
	if tr.Proxy == nil || tr.DialContext == nil {
		t.Fatal("no proxy from the environment or no dialer, as net/http's default has")
	}
	if tr.ForceAttemptHTTP2 != want.ForceAttemptHTTP2 || tr.MaxIdleConns != want.MaxIdleConns ||
		tr.IdleConnTimeout != want.IdleConnTimeout || tr.TLSHandshakeTimeout != want.TLSHandshakeTimeout ||
		tr.ExpectContinueTimeout != want.ExpectContinueTimeout {
		t.Fatalf("settings %v %d %v %v %v, net/http's default %v %d %v %v %v",
			tr.ForceAttemptHTTP2, tr.MaxIdleConns, tr.IdleConnTimeout, tr.TLSHandshakeTimeout, tr.ExpectContinueTimeout,
			want.ForceAttemptHTTP2, want.MaxIdleConns, want.IdleConnTimeout, want.TLSHandshakeTimeout, want.ExpectContinueTimeout)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
