package fakeapi

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes a kubeconfig file (mode 0600) whose current context points at the server,
// without credentials: hand it to a plugin binary as --kubeconfig or KUBECONFIG.
func (s *Server) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["limitbed-fakeapi"] = &clientcmdapi.Cluster{Server: s.URL}
	cfg.AuthInfos["limitbed-fakeapi"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["limitbed-fakeapi"] = &clientcmdapi.Context{Cluster: "limitbed-fakeapi", AuthInfo: "limitbed-fakeapi",
		Namespace: "default"}
	cfg.CurrentContext = "limitbed-fakeapi"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("fakeapi: write kubeconfig: %w", err)
	}
	return os.Chmod(path, 0o600)
}

// RESTConfig is a client-go configuration for the server.
func (s *Server) RESTConfig() *rest.Config {
	return &rest.Config{Host: s.URL, QPS: -1}
}
