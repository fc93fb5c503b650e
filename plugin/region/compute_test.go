package region

import (
	"encoding/binary"
	"errors"
	"testing"
)

func TestDecodeLimitbedCompute(t *testing.T) {
	g := [UUIDBytes]byte{0: 0xAA, 15: 3}
	b := LimitbedSpec{Priority: 5, Recent: 1, GPUs: [][16]byte{g}}.Bytes()[:LimitbedHeaderSize]
	c, err := DecodeLimitbedCompute(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Priority != 5 || c.RecentKernel != 1 || c.UtilSwitch != 1 || len(c.GPUs) != 1 || c.GPUs[0] != g {
		t.Fatalf("DecodeLimitbedCompute = %+v", c)
	}
	for name, mutate := range map[string]func([]byte) []byte{
		"short":     func(b []byte) []byte { return b[:100] },
		"magic 0":   func(b []byte) []byte { binary.NativeEndian.PutUint64(b[lbOffMagic:], 0); return b },
		"version 9": func(b []byte) []byte { binary.NativeEndian.PutUint32(b[lbOffVersion:], 9); return b },
	} {
		_, err := DecodeLimitbedCompute(mutate(append([]byte(nil), b...)))
		if !errors.Is(err, ErrNotRegion) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func FuzzDecodeLimitbedCompute(f *testing.F) {
	f.Add(LimitbedSpec{}.Bytes()[:LimitbedHeaderSize])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeLimitbedCompute(b)
		if err == nil && len(c.GPUs) > lbMaxDevices {
			t.Fatalf("%d GPUs", len(c.GPUs))
		}
	})
}
