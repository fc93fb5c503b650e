package nodeimage

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/limitbed/limitbed/harness/nodeimage/nodeimagetest"
)

func TestChoose(t *testing.T) {
	const built = "limitbed/kind-node:v1.37.2-0123456789ab"
	root, _ := nodeimagetest.Checkout(t, built)
	cases := []struct {
		mode              string
		present, registry bool
		want              Image
	}{
		{"", false, true, Image{Ref: Stock}},
		{"auto", true, false, Image{Ref: Stock}},
		{"auto", false, false, Image{Ref: built, Offline: true}},
		{" auto ", false, false, Image{Ref: built, Offline: true}},
		{"stock", false, false, Image{Ref: Stock}},
		{"offline", true, true, Image{Ref: built, Offline: true}},
		{"example.org/node:v1", false, false, Image{Ref: "example.org/node:v1"}},
		{"limitbed/kind-node:v1.37.2-abc", false, false, Image{Ref: "limitbed/kind-node:v1.37.2-abc", Offline: true}},
	}
	for _, tc := range cases {
		p := Probes{
			Present:  func(context.Context, string) bool { return tc.present },
			Registry: func(context.Context) bool { return tc.registry },
		}
		got, err := ChooseWith(t.Context(), slog.New(slog.DiscardHandler), root, tc.mode, p)
		if err != nil || got != tc.want {
			t.Errorf("%s=%q (present %v, registry %v) = %+v, %v; want %+v", Env, tc.mode, tc.present, tc.registry, got, err, tc.want)
		}
	}
}

// TestChooseWithoutCheckout: offline needs scripts/node-image.sh to name the image; without it the
// error names the script.
func TestChooseWithoutCheckout(t *testing.T) {
	p := Probes{Present: func(context.Context, string) bool { return false }, Registry: func(context.Context) bool { return false }}
	img, err := ChooseWith(t.Context(), slog.New(slog.DiscardHandler), t.TempDir(), "auto", p)
	if err == nil || !strings.Contains(err.Error(), "scripts/node-image.sh") {
		t.Fatalf("no checkout: got %+v, %v; want an error naming scripts/node-image.sh", img, err)
	}
}
