// trainq-api serves trainq's ML Space-compatible REST API.
//
//	trainq-api [--listen 127.0.0.1:8080] [--tokens FILE] [--config FILE]
//	           [--temporal-timeout 10s] [--body-timeout 30s] [--max-conns-per-client 64]
//	trainq-api token --tokens FILE --user U --workspace W [--role user|admin]
//
// It reads the same config as trainq-worker (--config or TRAINQ_CONFIG) and
// the standard Temporal settings (TEMPORAL_ADDRESS, ...). Tokens come from a
// file of SHA-256 hashes (--tokens or TRAINQ_API_TOKENS); `token` adds one
// and prints it, once. SIGHUP rereads the tokens file and the config, whose
// queues (nodes, classes, defaults, workspaces) then apply to later requests;
// a config that changes anything else is refused and the running one kept.
// Requests must arrive
// whole in time (headers 10s, body --body-timeout, else 408), and one client
// address may hold --max-conns-per-client connections (more get 429).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	sdklog "go.temporal.io/sdk/log"

	"github.com/trainq/trainq/api"
	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/config"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "token" {
		if err := addToken(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "trainq-api token:", err)
			os.Exit(2)
		}
		return
	}
	if err := serve(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "trainq-api:", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func addToken(args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	file := fs.String("tokens", env("TRAINQ_API_TOKENS", ""), "tokens file to add to (created if missing)")
	user := fs.String("user", "", "user the token acts as (recorded as the job author)")
	ws := fs.String("workspace", "", "workspace the token sees and submits to")
	role := fs.String("role", api.RoleUser, "user or admin (admin sees every workspace)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *file == "" || *user == "" || *ws == "" {
		return errors.New("--tokens, --user and --workspace are required")
	}
	token, err := api.AddToken(*file, *user, *ws, *role)
	if err != nil {
		return err
	}
	fmt.Println(token)
	return nil
}

func serve(args []string) error {
	fs := flag.NewFlagSet("trainq-api", flag.ContinueOnError)
	listen := fs.String("listen", env("TRAINQ_API_LISTEN", "127.0.0.1:8080"), "address to listen on")
	tokensPath := fs.String("tokens", env("TRAINQ_API_TOKENS", ""), "tokens file (YAML: tokens: [{sha256, user, workspace, role}])")
	cfgPath := fs.String("config", "", "trainq config file (default $TRAINQ_CONFIG, else the embedded default)")
	timeout := fs.Duration("temporal-timeout", 10*time.Second, "timeout of the Temporal calls of one request")
	bodyTimeout := fs.Duration("body-timeout", api.DefaultBodyTimeout, "time a request body may take to arrive (then 408)")
	maxConns := fs.Int("max-conns-per-client", 64, "open connections allowed per client address (more are answered 429)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if *tokensPath == "" {
		return errors.New("no tokens file: give --tokens or TRAINQ_API_TOKENS (create one with `trainq-api token --tokens FILE --user U --workspace W`)")
	}
	tokens, err := api.LoadTokens(*tokensPath)
	if err != nil {
		return err
	}
	c, err := client.DialLazy(sdklog.NewStructuredLogger(log.With("component", "temporal-client")))
	if err != nil {
		return err
	}
	defer c.Close()
	srv, err := api.New(api.Options{Config: cfg, Backend: client.New(c, cfg), Tokens: tokens,
		Logger: log, CallTimeout: *timeout, BodyTimeout: *bodyTimeout})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	// Headers and body must arrive in time; log streams renew their own
	// deadlines; each client address gets a bounded number of connections.
	sopts := api.ServerOptions{BodyTimeout: *bodyTimeout, MaxConnsPerClient: *maxConns}
	hs := api.NewHTTPServer(srv, sopts)
	ln = api.Listener(ln, sopts, srv.ConnectionRefused)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			if err := tokens.Reload(*tokensPath); err != nil {
				log.Error("tokens not reloaded", "err", err)
			} else {
				log.Info("tokens reloaded", "file", *tokensPath)
			}
			reloadConfig(log, srv, *cfgPath)
		}
	}()
	log.Info("trainq-api listening", "addr", ln.Addr().String(), "config", cfg.Source(), "data_dir", cfg.DataDir)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx) // log streams end when their clients go or the timeout passes
	return nil
}

// reloadConfig rereads the config file and applies it if only queues
// changed; a bad or unreloadable file is logged and the running config kept.
func reloadConfig(log *slog.Logger, srv *api.Server, path string) {
	next, err := config.Load(path)
	if err == nil {
		err = srv.Reload(next)
	}
	if err != nil {
		log.Error("config not reloaded; the running config stays", "err", err)
		return
	}
	log.Info("config reloaded", "config", next.Source())
}
