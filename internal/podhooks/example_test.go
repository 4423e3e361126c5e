package podhooks_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/podhooks"
	"github.com/drainkit/drainkit/kube"
)

// drain reads the preStop hook of each container from the spec kube's
// one read at start found (kube.Pod.Spec); the zero Spec, which a read
// that failed returns, has no containers.
func Example() {
	var spec kube.Spec // pod.Spec(ctx)'s
	for _, c := range podhooks.Of(spec).Containers {
		if h := c.PreStop; h != nil && h.HTTPGet != nil {
			fmt.Println(c.Name, "httpGet", h.HTTPGet.Port, h.HTTPGet.Path)
		}
	}
	fmt.Println("containers:", len(podhooks.Of(spec).Containers))
	// Output: containers: 0
}
