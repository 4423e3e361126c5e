package realkubelet

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// StateMount is where Pod mounts its state directory in the container.
const StateMount = "/state"

// Pod returns a static pod of one container of ImageRef running command:
// hostNetwork (its servers listen on the host's loopback), the host
// directory stateDir mounted at StateMount, the given grace period in
// seconds and preStop hook (nil for none), the image never pulled.
func Pod(name string, grace int64, stateDir string, hook *corev1.LifecycleHandler, command ...string) *corev1.Pod {
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	var lifecycle *corev1.Lifecycle
	if hook != nil {
		lifecycle = &corev1.Lifecycle{PreStop: hook}
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            name,
				Image:           ImageRef,
				ImagePullPolicy: corev1.PullNever,
				Command:         command,
				Lifecycle:       lifecycle,
				VolumeMounts:    []corev1.VolumeMount{{Name: "state", MountPath: StateMount}},
			}},
			Volumes: []corev1.Volume{{
				Name:         "state",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: stateDir, Type: &dirOrCreate}},
			}},
		},
	}
}

// HTTPGetHook is a preStop httpGet to 127.0.0.1:port/path. The host is
// explicit: the servers here listen on loopback only, and the kubelet
// v1.34 finds no address for a hostNetwork pod's httpGet hook without one
// (the runtime reports none: kubernetes/kubernetes#134285), so it never
// calls it (the README's manifest's test measures that).
func HTTPGetHook(port int, path string) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
		Host: "127.0.0.1", Port: intstr.FromInt(port), Path: path,
	}}
}

// ExecHook is a preStop exec of command in the container.
func ExecHook(command ...string) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: command}}
}

// SleepHook is a preStop sleep of seconds (KEP-3960).
func SleepHook(seconds int64) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: seconds}}
}
