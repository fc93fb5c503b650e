package kindcluster

import (
	"context"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Release names a Helm release in the cluster.
type Release struct {
	Name      string
	Namespace string
	Chart     string // chart directory
}

func (c *Cluster) helmConfig(ns string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &c.Kubeconfig
	flags.Namespace = &ns
	cfg := new(action.Configuration)
	debug := func(format string, v ...any) { c.logger.Debug(fmt.Sprintf(format, v...), "component", "helm") }
	if err := cfg.Init(flags, ns, "secret", debug); err != nil {
		return nil, fmt.Errorf("helm init for namespace %s: %w", ns, err)
	}
	return cfg, nil
}

// HelmInstall installs r with values and waits (up to wait) for its resources to be ready.
func (c *Cluster) HelmInstall(ctx context.Context, r Release, values map[string]any, wait time.Duration) error {
	chart, err := loader.Load(r.Chart)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", r.Chart, err)
	}
	cfg, err := c.helmConfig(r.Namespace)
	if err != nil {
		return err
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = r.Name, r.Namespace, true
	inst.Wait, inst.Timeout = true, wait
	if _, err := inst.RunWithContext(ctx, chart, values); err != nil {
		return fmt.Errorf("helm install %s (%s) in %s: %w", r.Name, r.Chart, r.Namespace, err)
	}
	return nil
}

// HelmUpgrade upgrades r to values (not reusing the old ones) and waits for the rollout.
func (c *Cluster) HelmUpgrade(ctx context.Context, r Release, values map[string]any, wait time.Duration) error {
	chart, err := loader.Load(r.Chart)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", r.Chart, err)
	}
	cfg, err := c.helmConfig(r.Namespace)
	if err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Wait, up.Timeout = r.Namespace, true, wait
	if _, err := up.RunWithContext(ctx, r.Name, chart, values); err != nil {
		return fmt.Errorf("helm upgrade %s in %s: %w", r.Name, r.Namespace, err)
	}
	return nil
}
