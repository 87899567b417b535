package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/internal/scheme"
)

// cliFieldManager is the field manager of every write of the command line; the controller's is
// v1alpha1.FieldManager ("tidegate").
const cliFieldManager = ops.FieldManager

// kubeOptions holds the flags that say how to reach the hub cluster, as kubectl and flux have them.
type kubeOptions struct {
	env   *cliEnv
	flags *genericclioptions.ConfigFlags
}

func newKubeOptions(env *cliEnv) *kubeOptions {
	f := genericclioptions.NewConfigFlags(false)
	// Flags the command line has no use for: no discovery cache, and the rarer impersonation and
	// transport options.
	f.CacheDir = nil
	f.ImpersonateUID = nil
	f.ImpersonateUserExtra = nil
	f.DisableCompression = nil
	f.ProxyURL = nil
	f.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c.UserAgent = "tidegate-cli"
		c.QPS, c.Burst = 50, 100
		return c
	}
	return &kubeOptions{env: env, flags: f}
}

func (k *kubeOptions) addFlags(root *cobra.Command) {
	k.flags.AddFlags(root.PersistentFlags())
}

// namespace is -n, else the kubeconfig context's namespace, else "default".
func (k *kubeOptions) namespace() (string, error) {
	ns, _, err := k.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", &exitError{code: exitUsage, err: fmt.Errorf("reading the kubeconfig: %w", err)}
	}
	return ns, nil
}

// client returns a client of the hub cluster, uncached, and the namespace to work in. The client
// can also watch (client.WithWatch), for get --watch.
func (k *kubeOptions) client() (client.Client, string, error) {
	ns, err := k.namespace()
	if err != nil {
		return nil, "", err
	}
	cfg, err := k.flags.ToRESTConfig()
	if err != nil {
		return nil, "", &exitError{code: exitUsage, err: fmt.Errorf("reading the kubeconfig: %w", err)}
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, "", &exitError{code: exitUsage, err: fmt.Errorf("connecting to %s: %w", cfg.Host, err)}
	}
	return c, ns, nil
}

// clientFor is the opening of every command that reads the hub and prints in -o's format: output
// is checked first (check is checkKubeOutput, or checkListOutput for get), so a format the command
// does not print is a usage error even when the kubeconfig cannot be read; then the client and
// the namespace, as client returns them.
func (k *kubeOptions) clientFor(output string, check func(string) error) (client.Client, string, error) {
	if err := check(output); err != nil {
		return nil, "", err
	}
	return k.client()
}

// silenceClientLogs keeps client-go and controller-runtime from logging on stderr: the command
// line reports errors itself. The loggers are global: main calls it once, before any client exists.
func silenceClientLogs() {
	klog.SetLogger(logr.Discard())
	klog.SetOutput(io.Discard)
	ctrllog.SetLogger(logr.Discard())
}

// apiError turns an API error about what (e.g. `fleetrollout fleet/web`) into exit code 2 with a
// message that says what went wrong, and the error's code (ops.CodeOf) for -o json.
func apiError(err error, what string) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	code := ops.CodeOf(err)
	return &exitError{code: exitUsage, err: ops.NewError(code, nil, ops.Describe(code, what, err), err)}
}
