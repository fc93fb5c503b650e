package allocate

import (
	"crypto/rand"
	"fmt"
)

// Profile selects whose behaviour the plugin reproduces.
type Profile string

const (
	// ProfileCurrent is this design: usage.cache, limits file by default.
	ProfileCurrent Profile = "current"
	// ProfileHAMiV210 behaves like HAMi v2.10's plugin, for version-skew
	// tests: environment only, a random <uuid>.cache, no file.
	ProfileHAMiV210 Profile = "hami-v2.10"
)

// ParseProfile validates a --compat-profile value.
func ParseProfile(s string) (Profile, error) {
	switch p := Profile(s); p {
	case ProfileCurrent, ProfileHAMiV210:
		return p, nil
	}
	return "", fmt.Errorf("compat profile %q is not one of %s|%s", s, ProfileCurrent, ProfileHAMiV210)
}

// randomUUID returns a random RFC 4122 version 4 UUID, the shape of the
// names HAMi v2.10 gave its cache files.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
