package annotations

import (
	"reflect"
	"strings"
	"testing"
)

func TestDecodePodDevices(t *testing.T) {
	a := ContainerDevice{UUID: "GPU-a", Type: "NVIDIA", UsedMem: 3000, UsedCores: 30}
	b := ContainerDevice{UUID: "GPU-b", Type: "NVIDIA", UsedMem: 5000, UsedCores: 0}
	cases := []struct {
		name, in string
		want     PodDevices
		wantErr  string
	}{
		{name: "empty", in: "", want: nil},
		{name: "one container one device", in: "GPU-a,NVIDIA,3000,30:;", want: PodDevices{{a}}},
		{name: "two containers same card", in: "GPU-a,NVIDIA,3000,30:;GPU-b,NVIDIA,5000,0:;", want: PodDevices{{a}, {b}}},
		{name: "two devices one container", in: "GPU-a,NVIDIA,3000,30:GPU-b,NVIDIA,5000,0:;", want: PodDevices{{a, b}}},
		{name: "empty entries keep indices", in: ";GPU-a,NVIDIA,3000,30:;;GPU-b,NVIDIA,5000,0:;", want: PodDevices{nil, {a}, nil, {b}}},
		{name: "all erased", in: ";;", want: PodDevices{nil, nil}},
		{name: "extra fields ignored", in: "GPU-a,NVIDIA,3000,30,numa0,extra:;", want: PodDevices{{a}}},
		{name: "no trailing separator", in: "GPU-a,NVIDIA,3000,30:", want: PodDevices{{a}}},
		{name: "too few fields", in: "GPU-a,NVIDIA,3000:;", wantErr: "has 3 fields"},
		{name: "bad mem", in: "GPU-a,NVIDIA,lots,30:;", wantErr: `Usedmem "lots"`},
		{name: "negative cores", in: "GPU-a,NVIDIA,1,-1:;", wantErr: `Usedcores "-1"`},
		{name: "empty uuid", in: ",NVIDIA,1,1:;", wantErr: "empty UUID"},
		{name: "error names container", in: "GPU-a,NVIDIA,3000,30:;x:;", wantErr: "container entry 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodePodDevices(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNextEraseEncode(t *testing.T) {
	p, err := DecodePodDevices(";GPU-a,NVIDIA,3000,30:;GPU-b,NVIDIA,5000,0:;")
	if err != nil {
		t.Fatal(err)
	}
	idx, devs, ok := p.Next()
	if !ok || idx != 1 || devs[0].UUID != "GPU-a" {
		t.Fatalf("Next = %d %v %v", idx, devs, ok)
	}
	p2 := p.Erase(idx)
	if got := p2.Encode(); got != ";;GPU-b,NVIDIA,5000,0:;" {
		t.Fatalf("Encode after erase = %q", got)
	}
	if len(p[1]) != 1 {
		t.Fatal("Erase modified its receiver")
	}
	idx, _, _ = p2.Next()
	if p2.Erase(idx).Pending() {
		t.Fatal("still pending after erasing every entry")
	}
}

func FuzzDecodePodDevices(f *testing.F) {
	f.Add("GPU-a,NVIDIA,3000,30:;GPU-b,NVIDIA,5000,0:;")
	f.Add(";;GPU-a,NVIDIA,1,2,3:GPU-b,X,0,0:;")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := DecodePodDevices(s)
		if err != nil {
			return
		}
		enc := p.Encode()
		p2, err := DecodePodDevices(enc)
		if err != nil {
			t.Fatalf("re-decode of %q (from %q): %v", enc, s, err)
		}
		if enc2 := p2.Encode(); enc2 != enc {
			t.Fatalf("encoding not stable: %q -> %q", enc, enc2)
		}
		if len(p2) != len(p) {
			t.Fatalf("container count changed: %d -> %d", len(p), len(p2))
		}
	})
}
