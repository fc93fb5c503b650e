package annotations

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// LockHolder is what the node's hami.io/mutex.lock says: when the scheduler
// took it and, in the current format, for which pod.
type LockHolder struct {
	Time      time.Time
	Namespace string // empty in the legacy timestamp-only format
	Name      string
}

// FormatNodeLock is the lock value for pod namespace/name at t:
// "<RFC3339>,<namespace>,<name>".
func FormatNodeLock(t time.Time, namespace, name string) string {
	return t.UTC().Format(time.RFC3339) + "," + namespace + "," + name
}

// ParseNodeLock reads a NodeLock value. The legacy format (a timestamp
// alone) parses with an empty owner. An owner that is not a valid namespace
// and pod name is an error: the value comes from the API server and is used
// to look the pod up.
func ParseNodeLock(v string) (LockHolder, error) {
	parts := strings.Split(v, ",")
	var h LockHolder
	switch len(parts) {
	case 1:
	case 3:
		h.Namespace, h.Name = parts[1], parts[2]
		if msgs := validation.IsDNS1123Label(h.Namespace); len(msgs) > 0 {
			return LockHolder{}, fmt.Errorf("node lock %q: namespace %q: %s", v, h.Namespace, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsDNS1123Subdomain(h.Name); len(msgs) > 0 {
			return LockHolder{}, fmt.Errorf("node lock %q: pod name %q: %s", v, h.Name, strings.Join(msgs, "; "))
		}
	default:
		return LockHolder{}, fmt.Errorf("node lock %q: want <RFC3339>,<namespace>,<name>", v)
	}
	t, err := time.Parse(time.RFC3339, parts[0])
	if err != nil {
		return LockHolder{}, fmt.Errorf("node lock %q: %w", v, err)
	}
	h.Time = t
	return h, nil
}

// Names reports whether the lock is held for pod namespace/name.
func (h LockHolder) Names(namespace, name string) bool {
	return h.Name != "" && h.Namespace == namespace && h.Name == name
}
