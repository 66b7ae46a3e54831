package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/server"
)

// Child is the cri-guard under test.
type Child struct {
	Endpoint string
	PID      int // 0: unknown (no CPU/RSS figures)
	Stop     func() error
}

// startProxy starts or attaches to cri-guard as the options say.
func startProxy(o benchOptions, workDir string, log *logrus.Entry) (*Child, error) {
	if err := os.MkdirAll(workDir, 0o750); err != nil {
		return nil, fmt.Errorf("create %q: %w", workDir, err)
	}
	switch {
	case o.ProxyEndpoint != "":
		return &Child{Endpoint: o.ProxyEndpoint, PID: o.ProxyPID, Stop: func() error { return nil }}, nil
	case o.Binary != "":
		return StartChild(childConfig(o), o.Binary, nil, workDir, log)
	}
	// The proxy core alone (runtimeproxy + server, no sync loop): this binary
	// re-executed as "serve-core".
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary: %w", err)
	}
	return StartChild(childConfig(o), self, []string{"serve-core"}, workDir, log)
}

// childConfig is what the child cri-guard of the options gets.
func childConfig(o benchOptions) ChildConfig {
	return ChildConfig{RuntimeEndpoint: o.RuntimeEndpoint, Args: o.ProxyArgs, Env: o.ProxyEnv}
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

// ProcStats are a process's CPU time and resident memory.
type ProcStats struct {
	CPU    time.Duration // user + system, all threads
	RSSKiB int64
	HWMKiB int64 // VmHWM: the peak of VmRSS
}

// ReadProcStats reads /proc/<pid>/stat (utime, stime in clock ticks, 100 Hz
// on Linux) and VmRSS and VmHWM from /proc/<pid>/status.
func ReadProcStats(pid int) (ProcStats, error) {
	var ps ProcStats
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	// Fields after the command name, which is in parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return ps, fmt.Errorf("parse stat of pid %d: %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return ps, fmt.Errorf("parse stat of pid %d: bad utime/stime", pid)
	}
	const ticksPerSecond = 100
	ps.CPU = time.Duration(utime+stime) * time.Second / ticksPerSecond

	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for key, dst := range map[string]*int64{"VmRSS:": &ps.RSSKiB, "VmHWM:": &ps.HWMKiB} {
			if v, ok := strings.CutPrefix(sc.Text(), key); ok {
				*dst, err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return ps, fmt.Errorf("parse %s of pid %d: %w", key, pid, err)
				}
			}
		}
	}
	return ps, sc.Err()
}
