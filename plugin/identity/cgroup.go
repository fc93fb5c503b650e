package identity

import (
	"bytes"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// ParseCgroup reads /proc/<pid>/cgroup (v1 or v2) and returns the pod UID
// and container ID that the runtime's hierarchy names, as the kubelet,
// cAdvisor and dcgm-exporter read them:
//
//	cgroupfs driver: .../kubepods/<qos>/pod<uid>/<container id>
//	systemd driver:  .../kubepods-<qos>-pod<uid with _>.slice/cri-containerd-<id>.scope
//	Docker alone:    /docker/<id>  or  /system.slice/docker-<id>.scope (no pod)
//
// The container ID is the segment right below the pod's, or, without a pod
// segment, the deepest segment that is a container ID (a kind node is itself
// a Docker container: its ID sits above the kubelet's hierarchy). Paths may be
// relative to the reader's cgroup namespace ("/../.."): only segments count.
// The unified (v2) line wins over v1 lines when it names something. Neither
// found: empty results, never an error (a host process).
func ParseCgroup(data []byte) (podUID types.UID, containerID string) {
	var best struct {
		pod types.UID
		id  string
	}
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		// hierarchy-ID:controllers:path; the path may itself hold ':'.
		parts := bytes.SplitN(line, []byte{':'}, 3)
		if len(parts) != 3 {
			continue
		}
		pod, id := parseCgroupPath(string(parts[2]))
		if id == "" && pod == "" {
			continue
		}
		if string(parts[0]) == "0" && len(parts[1]) == 0 {
			return pod, id // cgroup v2: the one hierarchy
		}
		// Prefer a line naming both, then one naming the pod.
		if score(pod, id) > score(best.pod, best.id) {
			best.pod, best.id = pod, id
		}
	}
	return best.pod, best.id
}

func score(pod types.UID, id string) int {
	s := 0
	if pod != "" {
		s += 2
	}
	if id != "" {
		s++
	}
	return s
}

func parseCgroupPath(path string) (types.UID, string) {
	segs := strings.Split(path, "/")
	var pod types.UID
	id := ""
	for i, s := range segs {
		if u, ok := podSegment(s); ok {
			pod, id = u, ""
			if i+1 < len(segs) {
				if c, ok := containerSegment(segs[i+1]); ok {
					return pod, c
				}
			}
			continue
		}
		if pod == "" {
			if c, ok := containerSegment(s); ok {
				id = c
			}
		}
	}
	if pod != "" {
		return pod, "" // the pod's own cgroup (a sandbox, or between containers)
	}
	return "", id
}

// podSegment recognises "pod<uid>" (cgroupfs) and "...-pod<uid_with_underscores>.slice" (systemd).
func podSegment(s string) (types.UID, bool) {
	if rest, ok := strings.CutSuffix(s, ".slice"); ok {
		i := strings.LastIndex(rest, "-pod")
		if i < 0 {
			return "", false
		}
		u := strings.ReplaceAll(rest[i+4:], "_", "-")
		return types.UID(u), isUUID(u)
	}
	if u, ok := strings.CutPrefix(s, "pod"); ok && isUUID(u) {
		return types.UID(u), true
	}
	return "", false
}

// containerSegment recognises a 64-hex container ID, bare or as a systemd
// scope of a runtime ("docker-", "cri-containerd-", "crio-" ... ".scope").
// CRI-O's "crio-conmon-<id>" is the monitor process, not the container.
func containerSegment(s string) (string, bool) {
	if rest, ok := strings.CutSuffix(s, ".scope"); ok {
		if strings.Contains(rest, "conmon") {
			return "", false
		}
		i := strings.LastIndexByte(rest, '-')
		if i < 0 {
			return "", false
		}
		s = rest[i+1:]
	}
	if len(s) != 64 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", false
		}
	}
	return s, true
}

// isUUID accepts the 8-4-4-4-12 hex form of a pod UID.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}
