package identity

import (
	"strconv"
	"strings"
)

// DeviceID is the kubelet device ID of replica n of the GPU uuid, as the
// device plugin advertises it ("<uuid>-<n>"). A MIG device is advertised as
// its own UUID, one to one.
func DeviceID(uuid string, n uint) string { return uuid + "-" + strconv.FormatUint(uint64(n), 10) }

// DeviceUUID returns the GPU or MIG UUID a kubelet device ID stands for.
// With known (the UUIDs the node's driver lists, MIG devices included) the
// ID must be one of them or a replica "<uuid>-<n>" of one; without, an ID
// starting with "MIG-" is a MIG UUID and any other must end in "-<n>". An ID
// of another shape, or of a GPU the driver does not list, is not a device of
// this node: false.
func DeviceUUID(id string, known map[string]bool) (string, bool) {
	if known != nil {
		if known[id] && strings.HasPrefix(id, "MIG-") {
			return id, true
		}
		base, ok := replicaBase(id)
		if ok && known[base] {
			return base, true
		}
		return "", false
	}
	if strings.HasPrefix(id, "MIG-") {
		return id, true
	}
	return replicaBase(id)
}

// replicaBase strips the "-<n>" of a replica ID.
func replicaBase(id string) (string, bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 || i == len(id)-1 {
		return "", false
	}
	for _, c := range id[i+1:] {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return id[:i], true
}
