package draingrpc

import (
	"strings"
	"sync"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/drainkit/drainkit/drain"
)

// healthPrefix is the full method prefix of the standard health service.
var healthPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

func isHealth(method string) bool { return strings.HasPrefix(method, healthPrefix) }

// notServing returns a health answer with every SERVING turned into
// NOT_SERVING; other statuses (a service unknown to the health server)
// and other messages are returned as they are. The handler's message is
// not modified: a health server may share it.
func notServing(m any) any {
	switch r := m.(type) {
	case *healthpb.HealthCheckResponse:
		if r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}
		}
	case *healthpb.HealthListResponse:
		out := &healthpb.HealthListResponse{Statuses: make(map[string]*healthpb.HealthCheckResponse, len(r.GetStatuses()))}
		for name, st := range r.GetStatuses() {
			out.Statuses[name], _ = notServing(st).(*healthpb.HealthCheckResponse)
		}
		return out
	}
	return m
}

// watchHealth runs a health stream (Watch) ungated. Every status the
// handler sends passes through notServing once the gate is closed, and
// when the gate closes while the stream last said SERVING, the stream is
// sent NOT_SERVING at once: Watch sends only on changes, and the health
// server has not changed.
func watchHealth(g *drain.Gate, srv any, ss grpc.ServerStream, h grpc.StreamHandler) error {
	ws := &healthStream{ServerStream: ss, g: g}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-g.Draining():
			ws.drained()
		case <-ss.Context().Done():
		case <-done:
		}
	})
	err := h(srv, ws)
	close(done)
	wg.Wait() // no SendMsg after the handler returned
	return err
}

// healthStream is a Watch stream whose statuses the gate can override.
// SendMsg is serialized: the handler and the drain notice both send.
type healthStream struct {
	grpc.ServerStream
	g    *drain.Gate
	mu   sync.Mutex
	sent bool                                       // a status went out
	last healthpb.HealthCheckResponse_ServingStatus // the last status sent
}

func (s *healthStream) SendMsg(m any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := m.(*healthpb.HealthCheckResponse)
	if !ok {
		return s.ServerStream.SendMsg(m)
	}
	if s.g.Closed() {
		r = notServing(r).(*healthpb.HealthCheckResponse)
		if s.sent && r.GetStatus() == s.last {
			return nil // the override already said so
		}
	}
	return s.send(r)
}

// drained tells a stream that last said SERVING that it no longer is.
func (s *healthStream) drained() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent && s.last == healthpb.HealthCheckResponse_SERVING {
		_ = s.send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
	}
}

func (s *healthStream) send(r *healthpb.HealthCheckResponse) error {
	if err := s.ServerStream.SendMsg(r); err != nil {
		return err
	}
	s.sent, s.last = true, r.GetStatus()
	return nil
}
