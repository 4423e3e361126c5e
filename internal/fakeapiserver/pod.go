package fakeapiserver

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A Pod is a handler for Start that answers as an API server holding one
// pod, for a kube.Pod: GET /api/v1/namespaces/Namespace/pods/Name answers
// the pod, with the deletionTimestamp and terminationGracePeriodSeconds
// last set; POST /apis/events.k8s.io/v1/namespaces/Namespace/events keeps
// the Event and answers 201 Created (400 for a body that is no Event); a
// GET of another pod in Namespace is PodNotFound; anything else is 404. Set its fields before it serves; its methods are
// safe while it serves.
type Pod struct {
	// Name, Namespace and UID are the pod's.
	Name, Namespace, UID string
	// Annotations are the pod's metadata.annotations: a static pod's
	// mirror pod has kubernetes.io/config.mirror, its static pod's UID.
	Annotations map[string]string
	// ReadsAnswered, when positive, is how many reads of the pod are
	// answered: the later ones get 503 Service Unavailable, an API server
	// gone. Zero answers every one.
	ReadsAnswered int

	mu         sync.Mutex
	deletion   time.Time // zero: none
	delGrace   int64     // deletionGracePeriodSeconds; zero: absent
	grace      *int64    // nil: none
	priority   int32     // spec.priority; zero: absent
	containers []corev1.Container
	inits      []corev1.Container // spec.initContainers
	hostNet    bool               // spec.hostNetwork
	status     int                // non-zero: every request is answered with it
	hang       bool               // every request hangs until its client gives up
	reads      int
	events     []eventsv1.Event
}

// SetDeletion sets the pod's deletionTimestamp, as a delete does: at is
// when the kubelet's SIGKILL is due.
func (p *Pod) SetDeletion(at time.Time) { p.set(func() { p.deletion = at }) }

// Delete deletes the pod at at with a grace of grace whole seconds, as
// the API server's graceful deletion does (k8s.io/apiserver's
// rest.BeforeDelete): the first sets deletionGracePeriodSeconds to grace
// and deletionTimestamp to at + grace; a later one with a shorter grace
// moves the deletionTimestamp back by the difference, to the first
// deletion's time plus the new grace, and if that is before at, to at with
// a grace of 1 s; a later one that is not shorter changes nothing. grace
// is at least a second: a deletion with none removes the pod at once, which
// this double does not do.
func (p *Pod) Delete(at time.Time, grace time.Duration) {
	g := int64(grace / time.Second)
	p.set(func() {
		switch {
		case p.deletion.IsZero() || p.delGrace == 0:
			p.deletion, p.delGrace = at.Add(time.Duration(g)*time.Second), g
		case g < p.delGrace:
			ts := p.deletion.Add(time.Duration(g-p.delGrace) * time.Second)
			if ts.Before(at) {
				ts, g = at, 1
			}
			p.deletion, p.delGrace = ts, g
		}
	})
}

// SetGrace sets the pod's spec.terminationGracePeriodSeconds.
func (p *Pod) SetGrace(seconds int64) { p.set(func() { p.grace = &seconds }) }

// SetPriority sets the pod's spec.priority, its PriorityClass's value.
func (p *Pod) SetPriority(priority int32) { p.set(func() { p.priority = priority }) }

// SetContainers sets the pod's spec.containers.
func (p *Pod) SetContainers(cs ...corev1.Container) { p.set(func() { p.containers = cs }) }

// SetInitContainers sets the pod's spec.initContainers (a native sidecar
// is one with restartPolicy Always).
func (p *Pod) SetInitContainers(cs ...corev1.Container) { p.set(func() { p.inits = cs }) }

// SetHostNetwork sets the pod's spec.hostNetwork: the node's network.
func (p *Pod) SetHostNetwork(on bool) { p.set(func() { p.hostNet = on }) }

// Refuse answers every request from now on with status and a Status
// (403: RBAC denies the service account, in the authorizer's words; 404
// to a GET: the pod removed, as PodNotFound); zero answers again.
func (p *Pod) Refuse(status int) { p.set(func() { p.status = status }) }

// Hang makes every request from now on hang until its client gives up.
func (p *Pod) Hang() { p.set(func() { p.hang = true }) }

func (p *Pod) set(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

// Reads returns how many times the pod was read (refused and hung
// requests aside).
func (p *Pod) Reads() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads
}

// Events returns the Events posted, in order.
func (p *Pod) Events() []eventsv1.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]eventsv1.Event(nil), p.events...)
}

// Reasons returns the posted Events' reasons, in order.
func (p *Pod) Reasons() []string {
	var out []string
	for _, ev := range p.Events() {
		out = append(out, ev.Reason)
	}
	return out
}

// ServeHTTP answers r as the API server holding the pod.
func (p *Pod) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	status, hang := p.status, p.hang
	p.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return
	}
	if status == http.StatusNotFound && r.Method == http.MethodGet {
		PodNotFound(w, p.Name) // the pod removed, in the API server's words
		return
	}
	if status != 0 {
		msg := "refused"
		if status == http.StatusForbidden {
			// As the API server's authorizer words a refusal (kube tells
			// RBAC's 403 from admission's by it).
			what, rule := `pods "`+p.Name+`"`, `get resource "pods" in API group ""`
			if r.Method == http.MethodPost {
				what, rule = "events.events.k8s.io", `create resource "events" in API group "events.k8s.io"`
			}
			msg = what + ` is forbidden: User "system:serviceaccount:` + p.Namespace + `:default" cannot ` + rule +
				` in the namespace "` + p.Namespace + `"`
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status"}, Message: msg})
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/"+p.Namespace+"/pods/"+p.Name:
		p.reads++
		if p.ReadsAnswered > 0 && p.reads > p.ReadsAnswered {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: types.UID(p.UID), Annotations: p.Annotations}}
		if !p.deletion.IsZero() {
			pod.DeletionTimestamp = &metav1.Time{Time: p.deletion}
		}
		if p.delGrace != 0 {
			pod.DeletionGracePeriodSeconds = new(p.delGrace)
		}
		if p.grace != nil {
			pod.Spec.TerminationGracePeriodSeconds = new(*p.grace)
		}
		if p.priority != 0 {
			pod.Spec.Priority = new(p.priority)
		}
		pod.Spec.Containers, pod.Spec.InitContainers, pod.Spec.HostNetwork = p.containers, p.inits, p.hostNet
		_ = json.NewEncoder(w).Encode(&pod)
	case r.Method == http.MethodPost && r.URL.Path == "/apis/events.k8s.io/v1/namespaces/"+p.Namespace+"/events":
		var ev eventsv1.Event
		if json.Unmarshal(body, &ev) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		p.events = append(p.events, ev)
		w.WriteHeader(http.StatusCreated)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/"+p.Namespace+"/pods/"):
		PodNotFound(w, strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"+p.Namespace+"/pods/")) // another pod's name
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// PodNotFound answers as the API server does a GET of a pod it does not
// have (measured on kube-apiserver v1.34.4): 404 with a Status whose
// reason is NotFound and whose details name the pod, kind "pods". A 404
// that names no pod (a proxy's page, the API server's answer to a path it
// does not serve) is not one.
func PodNotFound(w http.ResponseWriter, name string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Message: `pods "` + name + `" not found`, Reason: metav1.StatusReasonNotFound,
		Details: &metav1.StatusDetails{Name: name, Kind: "pods"}, Code: http.StatusNotFound,
	})
}
