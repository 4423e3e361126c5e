package manifest_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/examples/internal/manifest"
)

// A deploy test reads the container as the kubelet would: a variable
// listed twice has its last value, and the preStop hook's named port is
// the number the server's -hook-listen must use.
func ExampleEnv() {
	c := corev1.Container{
		Env: []corev1.EnvVar{
			{Name: "DRAINKIT_GRACE", Value: "60"},
			{Name: "DRAINKIT_GRACE", Value: "90"}, // a later patch appended it
		},
		Ports: []corev1.ContainerPort{{Name: "drain-hook", ContainerPort: 8081}},
	}
	fmt.Println(manifest.Env(c, "DRAINKIT_GRACE"), manifest.Env(c, "DRAINKIT_MARGIN") == "")
	fmt.Println(manifest.Port(c, "drain-hook"), manifest.Port(c, "9090"))
	// Output:
	// 90 true
	// 8081 9090
}
