//go:build linux

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/drainkit/drainkit/examples/internal/manifest"
)

// The manifests roll a node's pod out before its new one starts: a surged
// pod would start beside the old one, whose supervisor holds -report's lock
// on the same hostPath, and exit 2 until the old pod exits, which a
// DaemonSet deletes only once the new one is available: that node's
// rollout would stall (docs/operator.md, "The rollout strategy").
func TestManifestsRollWithMaxUnavailableNotMaxSurge(t *testing.T) {
	_, overlay := buildOverlay(t)
	for name, ds := range map[string]appsv1.DaemonSet{
		"deploy/daemonset.yaml":   manifest.DaemonSet(t, "deploy/daemonset.yaml", "terminationGracePeriodSeconds:", "terminationGracePeriod:"),
		"deploy/agentenv/overlay": overlay,
	} {
		s := ds.Spec.UpdateStrategy
		if s.Type != "" && s.Type != appsv1.RollingUpdateDaemonSetStrategyType || s.RollingUpdate == nil {
			continue // OnDelete, or the default: maxUnavailable 1, no surge
		}
		if surge := s.RollingUpdate.MaxSurge; surge != nil {
			nodes, err := intstr.GetScaledValueFromIntOrPercent(surge, 100, true)
			assert.NoError(t, err, name)
			assert.Zero(t, nodes, "%s: maxSurge %s", name, surge.String())
		}
	}
}
