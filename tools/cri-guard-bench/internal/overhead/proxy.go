package overhead

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/server"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// startProxy starts or attaches to cri-guard as the options say.
func startProxy(o benchOptions, workDir string, log *logrus.Entry) (*benchutil.Child, error) {
	if err := os.MkdirAll(workDir, 0o750); err != nil {
		return nil, fmt.Errorf("create %q: %w", workDir, err)
	}
	switch {
	case o.ProxyEndpoint != "":
		return &benchutil.Child{Endpoint: o.ProxyEndpoint, PID: o.ProxyPID, Stop: func() error { return nil }}, nil
	case o.Binary != "":
		return benchutil.StartChild(childConfig(o), o.Binary, nil, workDir, log)
	}
	// The proxy core alone (runtimeproxy + server, no sync loop): this binary
	// re-executed as "serve-core".
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary: %w", err)
	}
	return benchutil.StartChild(childConfig(o), self, []string{"serve-core"}, workDir, log)
}

// childConfig is what the child cri-guard of the options gets.
func childConfig(o benchOptions) benchutil.ChildConfig {
	return benchutil.ChildConfig{RuntimeEndpoint: o.RuntimeEndpoint, Args: o.ProxyArgs, Env: o.ProxyEnv}
}

// serveCore runs only the proxy core (runtimeproxy + server) until SIGTERM:
// what the benchmark measures when no --cri-guard-binary is given.
func serveCore(ctx context.Context, args []string, log *logrus.Entry) error {
	fs := flag.NewFlagSet("serve-core", flag.ContinueOnError)
	listen := fs.String("listen", "", "socket to listen on")
	endpoint := fs.String("runtime-endpoint", "", "runtime socket")
	fs.String("log-level", "warn", "ignored")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Same rule as cri-guard's main: one P unless GOMAXPROCS is set.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	rt, err := runtimeproxy.New(runtimeproxy.Config{Endpoint: *endpoint}, log.WithField("component", "runtimeproxy"))
	if err != nil {
		return err
	}
	defer rt.Close()
	srv, err := server.New(server.Config{Listen: *listen}, rt, nil, log.WithField("component", "server"))
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	return srv.Serve(ctx)
}
