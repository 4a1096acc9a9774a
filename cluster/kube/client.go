package kube

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig finds the API server: the kubeconfig file when one is named,
// else the pod's service account when trainq runs in the cluster, else
// $KUBECONFIG or ~/.kube/config, as kubectl does.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes.kubeconfig %s: %w", kubeconfig, err)
		}
	default:
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				return nil, fmt.Errorf("kubernetes.kubeconfig is empty, trainq does not run in a cluster, and no kubeconfig was found ($KUBECONFIG, ~/.kube/config): %w", err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
	}
	// One process serves every node's agent: allow more than client-go's
	// default 5 requests per second.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "trainq"
	return cfg, nil
}

// NewClient is a clientset for RESTConfig(kubeconfig).
func NewClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := RESTConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
