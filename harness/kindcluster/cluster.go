package kindcluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
)

// Options configure Create.
type Options struct {
	Name    string
	Image   NodeImage
	Workers []Worker
	// Dir receives the kubeconfig (kubeconfig) and is where Create keeps its files.
	Dir string
	// Wait bounds how long Create waits for the control plane to be Ready.
	Wait time.Duration
}

// Cluster is a running kind cluster.
type Cluster struct {
	Name       string
	Kubeconfig string
	Image      NodeImage
	Kube       kubernetes.Interface
	REST       *rest.Config
	// Scheduler acts as the HAMi scheduler's service account (SchedulerUser): the only identity,
	// besides the device plugin's, the chart's admission policy lets write placement annotations.
	Scheduler kubernetes.Interface

	provider *cluster.Provider
	logger   *slog.Logger
	workers  int
}

// Create creates the cluster (deleting a leftover one of the same name first) and waits for the
// control plane to be Ready; the caller must Delete it.
func Create(ctx context.Context, logger *slog.Logger, o Options) (*Cluster, error) {
	provider := cluster.NewProvider(cluster.ProviderWithLogger(kindLogger{logger}), cluster.ProviderWithDocker())
	existing, err := provider.List()
	if err != nil {
		return nil, fmt.Errorf("list kind clusters: %w", err)
	}
	if slices.Contains(existing, o.Name) {
		logger.Warn("deleting a leftover cluster", "cluster", o.Name)
		if err := provider.Delete(o.Name, ""); err != nil {
			return nil, fmt.Errorf("delete leftover cluster %s: %w", o.Name, err)
		}
	}
	kubeconfig := filepath.Join(o.Dir, "kubeconfig")
	cfg := kindConfig(o.Image, o.Workers, o.Image.Offline && hostCgroupV1())
	wait := o.Wait
	if wait == 0 {
		wait = 3 * time.Minute
	}
	err = provider.Create(o.Name,
		cluster.CreateWithV1Alpha4Config(cfg),
		cluster.CreateWithKubeconfigPath(kubeconfig),
		cluster.CreateWithWaitForReady(wait),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false),
	)
	c := &Cluster{Name: o.Name, Kubeconfig: kubeconfig, Image: o.Image, provider: provider, logger: logger, workers: len(o.Workers)}
	if err != nil {
		return c, fmt.Errorf("create kind cluster %s with %s: %w", o.Name, o.Image.Ref, err)
	}
	if c.REST, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return c, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	c.REST.QPS, c.REST.Burst = 50, 100
	if c.Kube, err = kubernetes.NewForConfig(c.REST); err != nil {
		return c, fmt.Errorf("kubernetes client: %w", err)
	}
	if c.Scheduler, err = schedulerIdentity(ctx, c.Kube, c.REST); err != nil {
		return c, err
	}
	return c, nil
}

// Worker returns the name of the i-th worker node (0-based).
func (c *Cluster) Worker(i int) string { return workerName(c.Name, i) }

// Delete deletes the cluster's nodes.
func (c *Cluster) Delete() error {
	if err := c.provider.Delete(c.Name, c.Kubeconfig); err != nil {
		return fmt.Errorf("delete kind cluster %s: %w", c.Name, err)
	}
	return nil
}

// ExportLogs writes kind's log bundle (journals, kubelet and containerd logs, pod logs) to dir.
func (c *Cluster) ExportLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("export logs: %w", err)
	}
	if err := c.provider.CollectLogs(c.Name, dir); err != nil {
		return fmt.Errorf("export logs of %s to %s: %w", c.Name, dir, err)
	}
	return nil
}

// LoadImages copies local Docker images into every node's containerd, like `kind load docker-image`.
func (c *Cluster) LoadImages(ctx context.Context, images ...string) error {
	nodes, err := c.provider.ListInternalNodes(c.Name)
	if err != nil {
		return fmt.Errorf("list nodes of %s: %w", c.Name, err)
	}
	tmp, err := os.CreateTemp("", "limitbed-images-*.tar")
	if err != nil {
		return fmt.Errorf("load images: %w", err)
	}
	defer os.Remove(tmp.Name())
	tmp.Close()
	save := exec.CommandContext(ctx, "docker", append([]string{"save", "-o", tmp.Name()}, images...)...)
	if out, err := save.CombinedOutput(); err != nil {
		return fmt.Errorf("docker save %v: %w: %s", images, err, out)
	}
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() {
			f, err := os.Open(tmp.Name())
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			if err := nodeutils.LoadImageArchive(n, f); err != nil {
				errs <- fmt.Errorf("load images into %s: %w", n.String(), err)
				return
			}
			errs <- nil
		}()
	}
	for range nodes {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	return err
}

// NodeExec runs a command in a node container (docker exec), returning its combined output.
func (c *Cluster) NodeExec(ctx context.Context, node string, argv ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "docker", append([]string{"exec", node}, argv...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("docker exec %s %v: %w: %s", node, argv, err, out)
	}
	return out, nil
}
