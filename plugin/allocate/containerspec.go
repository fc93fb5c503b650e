package allocate

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// EnvDisableControl in a container's spec turns the library off for it
// (HAMi's switch): no preload, no grant file.
const EnvDisableControl = "CUDA_DISABLE_CONTROL"

// specEnv returns the literal value of name in the container spec. Values
// from references (valueFrom) are not known to the plugin and are skipped.
// The last definition wins, as it does for the container runtime.
func specEnv(c *corev1.Container, name string) (string, bool) {
	val, ok := "", false
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			val, ok = e.Value, true
		}
	}
	return val, ok
}

// controlDisabled reports CUDA_DISABLE_CONTROL=true in the container spec
// (strconv.ParseBool semantics, as upstream).
func controlDisabled(c *corev1.Container) bool {
	v, ok := specEnv(c, EnvDisableControl)
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err == nil && b
}
