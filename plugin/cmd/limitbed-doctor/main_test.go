package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/limitbed/limitbed/harness/sandbox"
	"github.com/limitbed/limitbed/plugin/doctor"
)

// bareCluster has a node and nothing of the chart: every exec and proxy fails.
type bareCluster struct{ kube kubernetes.Interface }

func (b bareCluster) Kube() kubernetes.Interface { return b.kube }
func (b bareCluster) Container(context.Context, string, string, string) (sandbox.Container, error) {
	return nil, errors.New("no exec in this test")
}
func (b bareCluster) ProxyGet(context.Context, string, string, string, string) ([]byte, error) {
	return nil, errors.New("no proxy in this test")
}

// TestDoctorLiveModes: flags that do not go together, a cluster that cannot be reached and a
// missing pod exit 2 naming the cause; a failed check exits 1 with the report (text or JSON).
func TestDoctorLiveModes(t *testing.T) {
	connect := func(kubeconfig string) (doctor.Cluster, error) {
		if kubeconfig == "/nonexistent" {
			return nil, fmt.Errorf("kubeconfig %s: no such file", kubeconfig)
		}
		return bareCluster{fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})}, nil
	}
	cases := []struct {
		name    string
		args    []string
		code    int
		mention string // in stdout or stderr
	}{
		{"pod without namespace", []string{"--pod", "p"}, 2, "--pod needs --namespace"},
		{"pod and node", []string{"--namespace", "n", "--pod", "p", "--node", "n1"}, 2, "not both"},
		{"no target", nil, 2, "give --namespace N --pod P, or --node NODE"},
		{"json alone", []string{"--json"}, 2, "need --pod or --node"},
		{"container with node", []string{"--node", "n1", "--container", "c"}, 2, "--container and --gpu-tool go with --pod"},
		{"extra argument", []string{"--node", "n1", "x"}, 2, "unexpected arguments"},
		{"no cluster", []string{"--node", "n1", "--kubeconfig", "/nonexistent"}, 2, "no such file"},
		{"missing pod", []string{"--namespace", "n", "--pod", "p"}, 2, "get pod n/p"},
		{"node without the chart fails", []string{"--node", "n1"}, 1, "fail plugin"},
		{"json report", []string{"--node", "n1", "--json"}, 1, `"verdict": "fail"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errb, connect)
			if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.mention) {
				t.Fatalf("exit %d, want %d naming %q\nstdout: %s\nstderr: %s", code, tc.code, tc.mention, out.String(), errb.String())
			}
			if strings.Contains(strings.Join(tc.args, " "), "--json") && code == 1 {
				var rep doctor.Report
				if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.OK || len(rep.Checks) != 5 {
					t.Fatalf("JSON report %+v (%v):\n%s", rep, err, out.String())
				}
			}
		})
	}
}
