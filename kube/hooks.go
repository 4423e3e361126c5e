package kube

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/drainkit/drainkit/internal/podhooks"
)

// drain reads the containers' preStop hooks through internal/podhooks: no
// exported name here.
func init() {
	podhooks.Of = func(spec any) podhooks.Pod { return spec.(Spec).hooks() }
}

// podContainer is the part of one of a pod's containers this package
// reads: its name, its named ports and its preStop hook.
type podContainer struct {
	Name string `json:"name"`
	// RestartPolicy is an init container's: "Always" for a native
	// sidecar, which runs beside the containers until the pod ends.
	RestartPolicy string `json:"restartPolicy"`
	Ports         []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	Lifecycle *struct {
		PreStop   *podHandler `json:"preStop"`
		PostStart *podHandler `json:"postStart"`
	} `json:"lifecycle"`
}

// podHandler is a lifecycle handler as the API server serves it.
type podHandler struct {
	Exec *struct {
		Command []string `json:"command"`
	} `json:"exec"`
	HTTPGet *struct {
		Host        string    `json:"host"`
		Path        string    `json:"path"`
		Scheme      string    `json:"scheme"`
		Port        intOrName `json:"port"`
		HTTPHeaders []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"httpHeaders"`
	} `json:"httpGet"`
	Sleep *struct {
		Seconds int64 `json:"seconds"`
	} `json:"sleep"`
}

// intOrName is an IntOrString port, as text: 8082 or "hook".
type intOrName string

// UnmarshalJSON takes a JSON number or string.
func (p *intOrName) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		*p = intOrName(strconv.FormatInt(n, 10))
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*p = intOrName(s)
	return nil
}

// hooks is what s says of its containers' preStop hooks (podhooks.Of):
// spec.containers' and, after them, its native sidecars', the init
// containers with restartPolicy Always, whose hooks the kubelet runs too
// (kubecontainer.GetContainerSpec visits them); an init container that
// ran to its end has no hook to run.
func (s Spec) hooks() podhooks.Pod {
	pod := podhooks.Pod{HostNetwork: s.s.HostNetwork}
	for _, c := range s.stoppedContainers() {
		pc := podhooks.Container{Name: c.Name, Ports: map[string]int{}}
		for _, p := range c.Ports {
			if p.Name != "" {
				pc.Ports[p.Name] = p.ContainerPort
			}
		}
		if l := c.Lifecycle; l != nil && l.PreStop != nil {
			pc.PreStop = l.PreStop.handler()
		}
		if l := c.Lifecycle; l != nil && l.PostStart != nil {
			pc.PostStart = l.PostStart.handler()
		}
		pod.Containers = append(pod.Containers, pc)
	}
	return pod
}

// handler is h as podhooks has it.
func (h *podHandler) handler() *podhooks.Handler {
	var out podhooks.Handler
	switch {
	case h.Exec != nil:
		out.Exec = append([]string{}, h.Exec.Command...)
	case h.HTTPGet != nil:
		g := h.HTTPGet
		out.HTTPGet = &podhooks.HTTPGet{Host: g.Host, Path: g.Path, Scheme: g.Scheme, Port: string(g.Port)}
		for _, hd := range g.HTTPHeaders {
			out.HTTPGet.Headers = append(out.HTTPGet.Headers, podhooks.Header{Name: hd.Name, Value: hd.Value})
		}
	case h.Sleep != nil:
		out.Sleep = &h.Sleep.Seconds
	}
	return &out
}

// stoppedContainers are the containers whose preStop hooks the kubelet
// runs as the pod ends: spec.containers and, after them, the native
// sidecars (init containers with restartPolicy Always); an init container
// that ran to its end has nothing left to stop.
func (s Spec) stoppedContainers() []podContainer {
	cs := slices.Clone(s.s.Containers)
	for _, c := range s.s.InitContainers {
		if c.RestartPolicy == "Always" {
			cs = append(cs, c)
		}
	}
	return cs
}
