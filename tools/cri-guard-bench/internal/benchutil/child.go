package benchutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
)

// Child is the cri-guard under test.
type Child struct {
	Endpoint string       // its CRI socket
	PID      int          // 0: unknown (no CPU/RSS figures)
	Stop     func() error // StartChild's: SIGTERM, then SIGKILL after 15 s
}

// ChildConfig is what a child cri-guard is started with besides its socket.
type ChildConfig struct {
	RuntimeEndpoint string // the runtime the child forwards to (--runtime-endpoint)
	Args            string // extra space-separated arguments, after the bench's own
	Env             string // extra environment, comma-separated KEY=VALUE
}

// StartChild runs binary as a cri-guard under test in workDir: args, then
// --listen <workDir>/cri-guard.sock, --runtime-endpoint and --log-level
// warn, then c.Args; its output goes to <workDir>/cri-guard.log.
func StartChild(c ChildConfig, binary string, args []string, workDir string, log *logrus.Entry) (*Child, error) {
	sock := filepath.Join(workDir, "cri-guard.sock")
	logf, err := os.Create(filepath.Join(workDir, "cri-guard.log"))
	if err != nil {
		return nil, fmt.Errorf("create cri-guard log: %w", err)
	}
	args = append(args, "--listen", sock, "--runtime-endpoint", c.RuntimeEndpoint, "--log-level", "warn")
	args = append(args, strings.Fields(c.Args)...)
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	if c.Env != "" {
		cmd.Env = append(cmd.Env, strings.Split(c.Env, ",")...)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %q: %w", binary, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait(); logf.Close() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-waited:
			return err
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("cri-guard pid %d did not stop on SIGTERM", cmd.Process.Pid)
		}
	}
	log.WithFields(logrus.Fields{"pid": cmd.Process.Pid, "listen": sock, "binary": binary, "args": strings.Join(args, " ")}).Info("started cri-guard")
	return &Child{Endpoint: sock, PID: cmd.Process.Pid, Stop: stop}, nil
}

// Dial makes a client of the CRI runtime service at endpoint (a socket
// path or a unix:// address), taking replies as large as cri-guard does.
func Dial(endpoint string) (*grpc.ClientConn, runtimeapi.RuntimeServiceClient, error) {
	target, err := runtimeproxy.Target(endpoint)
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(runtimeproxy.DefaultMaxMsgSize)))
	if err != nil {
		return nil, nil, fmt.Errorf("dial %q: %w", endpoint, err)
	}
	return conn, runtimeapi.NewRuntimeServiceClient(conn), nil
}

// NamedBinary is one cri-guard binary measured, with its name in the table.
type NamedBinary struct{ Name, Path string }
