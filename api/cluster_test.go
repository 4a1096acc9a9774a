package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/trainq/trainq/config"
	"github.com/trainq/trainq/internal/tempcluster"
	"github.com/trainq/trainq/internal/testenv"
)

// startTestCluster starts the cluster of internal/tempcluster under dir.
func startTestCluster(root, dir string) (sdkclient.Client, string, func(), error) {
	bin, err := tempcluster.FindBinaries(root)
	if err != nil {
		return nil, "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := tempcluster.Start(ctx, bin, tempcluster.Options{Dir: filepath.Join(dir, "cluster")})
	if err != nil {
		return nil, "", nil, err
	}
	fmt.Printf("api: on a Temporal %s cluster (PostgreSQL, %d history shards, four service processes), frontend %s\n",
		tempcluster.Version, c.Shards(), c.HostPort())
	cl, err := c.Client(ctx)
	if err != nil {
		c.Stop()
		return nil, "", nil, err
	}
	return cl, c.HostPort(), func() { cl.Close(); c.Stop() }, nil
}

// agentArgs runs the agents of every node of the config in one process.
func agentArgs(configPath string) []string {
	cfg, err := config.Load(configPath)
	if err != nil {
		panic(err)
	}
	args := []string{"agent", "--config", configPath}
	for _, n := range cfg.Nodes() {
		args = append(args, "--node", n)
	}
	return args
}

// apiServed counts the requests each trainq-api replica was sent.
var apiServed [2]atomic.Int64

// startAPIReplicas builds bin/trainq-api, starts two of it on the test's
// config and tokens, and returns a test server that sends requests to them
// in turn (a load balancer's round robin; streams are flushed at once).
func startAPIReplicas(root, configPath, tokensPath, hostPort string) (*httptest.Server, func(), error) {
	bin := filepath.Join(env.dir, "bin", "trainq-api")
	if err := testenv.Build(root, bin, "./cmd/trainq-api"); err != nil {
		return nil, nil, err
	}
	var procs []*testenv.WorkerProcess
	stop := func() {
		for _, p := range procs {
			p.Stop(10 * time.Second)
		}
	}
	var targets []*url.URL
	for i := 0; i < 2; i++ {
		port, err := testenv.FreePort()
		if err != nil {
			stop()
			return nil, nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		p, err := testenv.StartWorker(bin, []string{"--listen", addr, "--config", configPath, "--tokens", tokensPath, "--temporal-timeout", "15s"},
			[]string{"TEMPORAL_ADDRESS=" + hostPort})
		if err != nil {
			stop()
			return nil, nil, err
		}
		procs = append(procs, p)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = p.WaitLog(ctx, "trainq-api listening")
		cancel()
		if err != nil {
			stop()
			return nil, nil, err
		}
		targets = append(targets, &url.URL{Scheme: "http", Host: addr})
	}
	var next atomic.Int64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			i := next.Add(1) % 2
			apiServed[i].Add(1)
			r.SetURL(targets[i])
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1,
	}
	srv := httptest.NewServer(proxy)
	return srv, func() {
		stop()
		if os.Getenv("TRAINQ_CLUSTER_KEEP") != "" {
			for i, p := range procs {
				fmt.Fprintf(os.Stderr, "trainq-api %d log:\n%s\n", i, p.LogTail(30))
			}
		}
	}, nil
}

var _ http.Handler = (*httputil.ReverseProxy)(nil)

// TestAPIReplicasAlternate: on the cluster, a job submitted through one
// trainq-api replica is seen, cancelled and listed through the other.
func TestAPIReplicasAlternate(t *testing.T) {
	needServer(t)
	if !env.cluster {
		t.Skip("needs TRAINQ_TEST_CLUSTER=1: two trainq-api processes")
	}
	before := [2]int64{apiServed[0].Load(), apiServed[1].Load()}
	for i := 0; i < 6; i++ {
		r := call(t, "alice", "GET", "/public/v2/jobs", nil)
		require.Equal(t, 200, r.Code, string(r.Body))
	}
	for i := range before {
		assert.GreaterOrEqual(t, apiServed[i].Load()-before[i], int64(3), "replica %d", i)
	}
}
