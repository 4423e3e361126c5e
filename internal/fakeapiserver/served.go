package fakeapiserver

import (
	"net/http"
	"sync"

	eventsv1 "k8s.io/api/events/v1"
)

// Served is a handler for Start that serves the Pod it holds, as an API
// server whose pod of a name is replaced: after kubectl delete --force a
// StatefulSet makes a new pod of the same name with a UID of its own.
// Tests use it to read a pod at start and replace it later. Make it with
// NewServed; it is safe while it serves.
type Served struct {
	mu   sync.Mutex
	pods []*Pod // every pod it held; the last is served
}

// NewServed returns a Served holding p.
func NewServed(p *Pod) *Served { return &Served{pods: []*Pod{p}} }

// ServeHTTP answers as the pod held now.
func (s *Served) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.Pod().ServeHTTP(w, r) }

// Pod returns the pod held now.
func (s *Served) Pod() *Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[len(s.pods)-1]
}

// Replace holds and returns a new pod of the held one's name and
// namespace with uid: the pod the API server has under the name from now
// on.
func (s *Served) Replace(uid string) *Pod {
	old := s.Pod()
	p := &Pod{Name: old.Name, Namespace: old.Namespace, UID: uid}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = append(s.pods, p)
	return p
}

// Events returns the Events posted on every pod it held, in the order the
// pods were held.
func (s *Served) Events() []eventsv1.Event {
	s.mu.Lock()
	pods := append([]*Pod(nil), s.pods...)
	s.mu.Unlock()
	var evs []eventsv1.Event
	for _, p := range pods {
		evs = append(evs, p.Events()...)
	}
	return evs
}
