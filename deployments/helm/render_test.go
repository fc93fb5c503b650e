package helm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

const chartDir = "limitbed"

// rendered is the chart's output for one set of values.
type rendered struct {
	ds *appsv1.DaemonSet
	cm *corev1.ConfigMap
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// manifestErr renders the chart as `helm install --dry-run` without a cluster does.
func manifestErr(t *testing.T, values map[string]any) (string, error) {
	t.Helper()
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "limitbed", "kube-system"
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
	rel, err := inst.Run(loadChart(t), values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// manifests are the rendered documents.
func manifests(t *testing.T, values map[string]any) []string {
	t.Helper()
	m, err := manifestErr(t, values)
	if err != nil {
		t.Fatalf("render chart: %v", err)
	}
	var docs []string
	for _, doc := range strings.Split(m, "\n---") {
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, doc)
		}
	}
	return docs
}

// renderErr renders the chart and picks the DaemonSet and the ConfigMap.
func renderErr(t *testing.T, values map[string]any) (rendered, error) {
	t.Helper()
	manifest, err := manifestErr(t, values)
	if err != nil {
		return rendered{}, err
	}
	var r rendered
	dec := scheme.Codecs.UniversalDeserializer()
	for _, doc := range strings.Split(manifest, "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := dec.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode rendered manifest: %v\n%s", err, doc)
		}
		switch o := obj.(type) {
		case *appsv1.DaemonSet:
			r.ds = o
		case *corev1.ConfigMap:
			r.cm = o
		}
	}
	if r.ds == nil || r.cm == nil {
		t.Fatalf("rendered chart lacks the DaemonSet or the ConfigMap:\n%s", manifest)
	}
	return r, nil
}

func render(t *testing.T, values map[string]any) rendered {
	t.Helper()
	r, err := renderErr(t, values)
	if err != nil {
		t.Fatalf("render chart: %v", err)
	}
	return r
}

func (r rendered) container(t *testing.T, name string) corev1.Container {
	t.Helper()
	spec := r.ds.Spec.Template.Spec
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q in the DaemonSet", name)
	return corev1.Container{}
}

// arg returns the value of --name=value in c's args, and whether it is there.
func arg(c corev1.Container, name string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func env(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// mountOf returns the mount path of volume vol in c and the volume's hostPath.
func (r rendered) mountOf(t *testing.T, c corev1.Container, vol string) (mountPath, hostPath string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name == vol {
			mountPath = m.MountPath
		}
	}
	for _, v := range r.ds.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.HostPath != nil {
			hostPath = v.HostPath.Path
		}
	}
	return mountPath, hostPath
}

// values builds a values map from dotted keys: values("a.b", 1) = {a: {b: 1}}.
func values(kv ...any) map[string]any {
	out := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m := out
		parts := strings.Split(kv[i].(string), ".")
		for _, p := range parts[:len(parts)-1] {
			if _, ok := m[p]; !ok {
				m[p] = map[string]any{}
			}
			m = m[p].(map[string]any)
		}
		m[parts[len(parts)-1]] = kv[i+1]
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found from %s: %v", root, err)
	}
	return root
}
