package client

import (
	"context"
	"fmt"

	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	sdklog "go.temporal.io/sdk/log"
)

// Dial connects to Temporal with the standard TEMPORAL_* environment
// variables and config profiles (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, ...).
func Dial(ctx context.Context, logger sdklog.Logger) (sdkclient.Client, error) {
	opts, err := ClientOptions(logger)
	if err != nil {
		return nil, err
	}
	return DialOptions(ctx, opts)
}

// ClientOptions reads the standard TEMPORAL_* settings and config profiles
// (Temporal's envconfig).
func ClientOptions(logger sdklog.Logger) (sdkclient.Options, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return opts, fmt.Errorf("temporal connection settings: %w", err)
	}
	opts.Logger = logger
	return opts, nil
}

// DialOptions connects with opts and says plainly what to do when Temporal
// cannot be reached.
func DialOptions(ctx context.Context, opts sdkclient.Options) (sdkclient.Client, error) {
	c, err := sdkclient.DialContext(ctx, opts)
	if err != nil {
		addr := opts.HostPort
		if addr == "" {
			addr = sdkclient.DefaultHostPort
		}
		return nil, fmt.Errorf("cannot reach Temporal at %s (set TEMPORAL_ADDRESS, or start a dev server with `make dev`): %w", addr, err)
	}
	return c, nil
}

// DialLazy is Dial without connecting: the connection is made on first use,
// so a server (the REST API) can start and answer 503 while Temporal is down.
func DialLazy(logger sdklog.Logger) (sdkclient.Client, error) {
	opts, err := ClientOptions(logger)
	if err != nil {
		return nil, err
	}
	return sdkclient.NewLazyClient(opts)
}

// Namespace is the Temporal namespace the environment selects.
func Namespace() string {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil || opts.Namespace == "" {
		return sdkclient.DefaultNamespace
	}
	return opts.Namespace
}
