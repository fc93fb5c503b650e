package launch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseJobFiles(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		in      string
		want    map[string][]byte
		wantErr bool
	}{
		{name: "empty", in: "", want: map[string][]byte{}},
		{name: "files with newlines and empty", in: "rc 2\n0\nstdout 4\na\nb\nstderr 0\n",
			want: map[string][]byte{"rc": []byte("0\n"), "stdout": []byte("a\nb\n"), "stderr": {}}},
		{name: "size beyond data", in: "rc 9\n0\n", wantErr: true},
		{name: "no size", in: "rc\n", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseJobFiles([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestParseEnv(t *testing.T) {
	t.Parallel()
	got := parseEnv([]byte("A=1\x00MULTI=x\ny\x00EQ=a=b\x00\x00"))
	want := map[string]string{"A": "1", "MULTI": "x\ny", "EQ": "a=b"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseProbe(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, stdout, want string
	}{
		{"none", "hello\n", ""},
		{"last json line wins", "{\"a\":1}\nlog\n{\"ok\":false,\"mib\":4096}\n", `{"ok":false,"mib":4096}`},
		{"invalid json skipped", "{\"ok\":true}\n{not json\n", `{"ok":true}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, obj := parseProbe([]byte(tc.stdout))
			if string(raw) != tc.want || (tc.want == "") != (obj == nil) {
				t.Errorf("parseProbe = %s, %v; want %s", raw, obj, tc.want)
			}
		})
	}
}

func TestMethodTable(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, m := range Methods() {
		if seen[m.Name] {
			t.Errorf("duplicate method %q", m.Name)
		}
		seen[m.Name] = true
		if m.argv == nil || m.Doc == "" || m.User == "" {
			t.Errorf("method %q is incomplete", m.Name)
		}
		if got, err := Lookup(m.Name); err != nil || got.Name != m.Name {
			t.Errorf("Lookup(%q) = %q, %v", m.Name, got.Name, err)
		}
	}
	// The design's table: these and only these keep the container's environment.
	want := map[string]bool{"exec": true, "bash -c": true, "&": true, "su": true, "su -": false, "sudo": false,
		"sudo -i": false, "ssh": false, "cron": false, "login": false, "runuser -l": false}
	for name, keeps := range want {
		m, err := Lookup(name)
		if err != nil {
			t.Errorf("method %q missing: %v", name, err)
			continue
		}
		if m.KeepsEnv != keeps {
			t.Errorf("method %q: KeepsEnv = %v, want %v", name, m.KeepsEnv, keeps)
		}
	}
	if _, err := Lookup("telnet"); err == nil {
		t.Error("Lookup of an unknown method succeeded")
	}
}
