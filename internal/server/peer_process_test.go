package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/runtimeproxy"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// The tests here need connections from another process: SO_PEERCRED names
// the process that connected, so the test binary runs itself again as a
// helper (TestHelperProcess) that opens the hostile connections while the
// test process plays the kubelet.
const (
	helperEnv      = "CRI_GUARD_TEST_HELPER"
	helperSockEnv  = "CRI_GUARD_TEST_HELPER_SOCK"
	helperConnsEnv = "CRI_GUARD_TEST_HELPER_CONNS"

	// helperEvents: connections that each hold a GetContainerEvents call.
	helperEvents = "events"
	// helperSilent: connections that never send the HTTP/2 preface.
	helperSilent = "silent"
)

// TestHelperProcess is not a test: it is the helper process's body when
// run with helperEnv set. It opens the connections, prints "ready", prints
// "closed" once the server has closed all of them, and exits when its
// stdin closes.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process body; runs only when re-executed by a test")
	}
	path := os.Getenv(helperSockEnv)
	n, err := strconv.Atoi(os.Getenv(helperConnsEnv))
	if err != nil {
		t.Fatal(err)
	}
	dones := make([]chan struct{}, n)
	fcs := make([]frameCounts, n)
	var block []byte
	if mode == helperEvents {
		block = callHeaders(runtimeapi.RuntimeService_GetContainerEvents_FullMethodName)
	}
	for i := range n {
		rc := dialRaw(t, path)
		if mode == helperEvents {
			// Errors are those of a connection the server closed: the
			// count of closed connections says so.
			if rc.tryHandshake() == nil {
				rc.mu.Lock()
				if rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}) == nil {
					// an empty GetEventsRequest, not the end of the stream
					_ = rc.fr.WriteData(1, false, []byte{0, 0, 0, 0, 0})
				}
				rc.mu.Unlock()
			}
		}
		dones[i] = rc.readLoop(&fcs[i])
	}
	// Only for the log: how many are still open a moment later.
	time.Sleep(time.Second)
	open := 0
	for _, d := range dones {
		select {
		case <-d:
		default:
			open++
		}
	}
	fmt.Printf("ready, %d open\n", open)
	go func() {
		for _, d := range dones {
			<-d
		}
		fmt.Println("closed")
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// helper is a running helper process.
type helper struct {
	lines chan string
	stdin io.Closer
}

// startHelper runs the helper process with n connections of mode to path
// and waits for it to be ready.
func startHelper(t *testing.T, mode, path string, n int) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperSockEnv+"="+path, helperConnsEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{lines: make(chan string, 16), stdin: stdin}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line := h.wait(t, "ready", 60*time.Second)
	t.Logf("helper %s: %d connections, %s", mode, n, line)
	return h
}

// wait returns the first line of the helper starting with prefix.
func (h *helper) wait(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper exited before %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("no %q from the helper within %v", prefix, d)
		}
	}
}

// kubeletVersion calls Version on a new connection from this process, as
// the kubelet would after a restart, and fails the test unless it answers
// within 10 s (the connection waits for a place instead of failing fast).
func kubeletVersion(t *testing.T, e *env) {
	t.Helper()
	conn := dialCRI(t, socketPath(e))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("Version on a new connection from another process: %v", err)
	}
}

// TestEventStreamsOfOneProcessLeaveRoomForAnother: one process opening as
// many connections as the server serves, each holding an event stream,
// gets MaxConnectionsPerPeer of them; a new connection from another
// process (the kubelet) is served.
func TestEventStreamsOfOneProcessLeaveRoomForAnother(t *testing.T) {
	e := newEnv(t, nil)
	startHelper(t, helperEvents, socketPath(e), defaultMaxConnections)
	kubeletVersion(t, e)
}

// TestFullServerMakesRoomForALightPeer: one process holding every place
// (its own limit set as high as the server's) still leaves the kubelet a
// connection: the newcomer takes the place of the heavy peer's newest.
func TestFullServerMakesRoomForALightPeer(t *testing.T) {
	const maxConns = 16
	e := newEnvCfg(t, nil, func(cfg *Config, _ *runtimeproxy.Client) {
		cfg.MaxConnections = maxConns
		cfg.MaxConnectionsPerPeer = maxConns
	})
	startHelper(t, helperEvents, socketPath(e), maxConns)
	held := func() int { total, _ := e.srv.lis.(*peerListener).held(peerID{}); return total }
	if !testutil.Within(10*time.Second, func() bool { return held() == maxConns }) {
		t.Fatalf("%d connections held with the helper's %d, want the cap", held(), maxConns)
	}
	kubeletVersion(t, e)
}

// TestSilentConnectionsDoNotBlock: a process opening more connections than
// the server serves, none sending the HTTP/2 preface, does not hold up a
// new connection from another process, and all its connections are closed
// by the server: the extra ones at once, the others when their handshake
// time is up.
func TestSilentConnectionsDoNotBlock(t *testing.T) {
	const conns = 1500
	e := newEnv(t, nil)
	h := startHelper(t, helperSilent, socketPath(e), conns)
	kubeletVersion(t, e)
	h.wait(t, "closed", 30*time.Second)
}
