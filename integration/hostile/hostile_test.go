//go:build integration

// Package hostile measures the built cri-guard binary (bin/cri-guard, from
// make build) under floods from a local client, in front of an in-process fake
// runtime: RSS, goroutines and descriptors during and after 100,000 HEADERS
// frames on one CRI connection and 20,000 connection attempts on the
// metrics port, and a CRI call's latency meanwhile. It logs the figures and
// asserts their bounds: no CRI call fails meanwhile, the HEADERS flood is
// refused past the per-connection stream limit and RSS stays under
// maxFloodRSSMiB, the metrics flood holds no more descriptors than its
// connection cap allows, and after each flood the descriptors and
// goroutines come back to the idle figures (and, as every harness start,
// cri-guard exits cleanly on SIGINT at the end). It stops within a few
// minutes.
//
//	make build && go test -tags integration -v -run TestHostile ./integration/hostile/
package hostile

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/integration/harness"
	"github.com/cri-guard/cri-guard/internal/runtimeproxy/fakeruntime"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// The bounds the floods must keep. A flood of streams or connections may
// cost a connection's buffers and a goroutine per call in flight, never
// memory or descriptors without bound.
const (
	// streamLimit is the CRI server's streams per connection
	// (server.defaultMaxConcurrentStreams): the flood's streams past it
	// are refused.
	streamLimit = 1000
	// metricsConnCap is the metrics endpoint's connections served at once
	// (httpserve.defaultMaxConns). Each scrape served may also hold a
	// file of /proc/self open for a moment (the process collector), so
	// the flood may hold up to two descriptors per connection served, and
	// a few more (housekeeping's stats files, the log): 74 over idle at
	// most when measured, where a leak of the 20,000 attempts' sockets
	// would be thousands.
	metricsConnCap = 64
	fdSlack        = 8
	// maxFloodRSSMiB bounds RSS during the HEADERS flood: 1000 calls in
	// flight with their buffers, about 25 MiB over idle when measured.
	maxFloodRSSMiB = 64
	// settledFDs and settledGoroutines: how far over idle the floods may
	// leave cri-guard once it has settled (the CRI client's connection,
	// the runtime's, the metrics scrape's own).
	settledFDs        = 2
	settledGoroutines = 10
)

type proc struct{ pid int }

func (p proc) rssMiB() float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.Fields(v)[0])
			return float64(kb) / 1024
		}
	}
	return -1
}

func (p proc) fds() int {
	e, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid))
	return len(e)
}

// goroutines reads go_goroutines from the metrics endpoint.
func goroutines(addr string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return -1
}

// calls is what latency saw of the Version calls it made.
type calls struct {
	n, fails   int
	p50, worst time.Duration
}

func (c calls) String() string {
	return fmt.Sprintf("%d Version calls, %d failed, p50 %v, max %v", c.n, c.fails, c.p50.Round(10*time.Microsecond), c.worst.Round(10*time.Microsecond))
}

// latency calls Version every 20ms until stop; the function it returns
// waits for the last call and reports them all.
func latency(rt runtimeapi.RuntimeServiceClient, stop <-chan struct{}) func() calls {
	var (
		mu  sync.Mutex
		c   calls
		all []time.Duration
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := time.Now()
			_, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
			d := time.Since(start)
			cancel()
			mu.Lock()
			c.n++
			if err != nil {
				c.fails++
			}
			c.worst = max(c.worst, d)
			all = append(all, d)
			mu.Unlock()
		}
	}()
	return func() calls {
		<-done
		slices.Sort(all)
		if len(all) > 0 {
			c.p50 = all[len(all)/2]
		}
		return c
	}
}

func TestHostileMeasure(t *testing.T) {
	bin := harness.Path(t, "bin/cri-guard")
	if b := os.Getenv("CRI_GUARD_BIN"); b != "" { // e.g. an older build to compare
		bin = b
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s missing: run make build first", bin)
	}
	dir := harness.ShortTempDir(t)
	fake := fakeruntime.Start(t, filepath.Join(dir, "rt.sock"))
	procRoot, cgRoot := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	for _, d := range []string{filepath.Join(procRoot, "pressure"), cgRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	harness.WriteMeminfo(t, filepath.Join(procRoot, "meminfo"), 12<<30)
	harness.WriteAtomic(t, filepath.Join(procRoot, "pressure", "memory"), "some avg10=0.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n")
	metricsAddr := testutil.FreeAddr(t)
	cfg := filepath.Join(dir, "config.yaml")
	harness.WriteAtomic(t, cfg, fmt.Sprintf("psiTrigger: \"\"\nmetricsAddress: %s\nadminSocket: %s\n", metricsAddr, filepath.Join(dir, "admin.sock")))
	// warn, after the harness's debug: a log line per refused stream would
	// be part of what is measured
	g := harness.StartGuard(t, bin, fake.Path, "--config", cfg, "--proc-root", procRoot, "--cgroup-root", cgRoot, "--log-level", "warn")
	sock := g.Socket
	p := proc{g.Cmd.Process.Pid}
	rt, _ := harness.DialCRI(t, sock)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	idleFDs, idleG := p.fds(), goroutines(metricsAddr)
	t.Logf("idle: RSS %.1f MiB, %d fds, %d goroutines", p.rssMiB(), idleFDs, idleG)
	// settled waits (a minute at most) for the descriptors and goroutines
	// to come back near idle, and fails the test if they do not: a flood
	// must leave nothing behind once its connections are gone.
	settled := func(what string) {
		t.Helper()
		start := time.Now()
		var fds, g int
		ok := testutil.Within(time.Minute, func() bool {
			fds, g = p.fds(), goroutines(metricsAddr)
			return fds <= idleFDs+settledFDs && g >= 0 && g <= idleG+settledGoroutines
		})
		t.Logf("%s: back to %d fds, %d goroutines, RSS %.1f MiB after %v", what, fds, g, p.rssMiB(), time.Since(start).Round(100*time.Millisecond))
		if !ok {
			t.Errorf("%s: a minute after, %d fds and %d goroutines, want at most %d and %d (idle %d and %d)",
				what, fds, g, idleFDs+settledFDs, idleG+settledGoroutines, idleFDs, idleG)
		}
	}

	// A: 100,000 HEADERS-only streams on one connection
	{
		const streams = 100_000
		c, err := net.Dial("unix", sock)
		must(err)
		fr := http2.NewFramer(c, c)
		// the preface and SETTINGS go first, before the reader below can
		// answer the server's SETTINGS: an ACK ahead of the preface is a
		// protocol error, and the server closes the connection
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		must(fr.WriteSettings())
		var wmu sync.Mutex
		var refused atomic.Int64
		var lastFrame atomic.Value
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					lastFrame.Store(fmt.Sprintf("read: %v", err))
					return
				}
				lastFrame.Store(fmt.Sprintf("%T %v", f, f.Header()))
				if g, ok := f.(*http2.GoAwayFrame); ok {
					lastFrame.Store(fmt.Sprintf("GOAWAY %v %q", g.ErrCode, g.DebugData()))
				}
				switch f := f.(type) {
				case *http2.RSTStreamFrame:
					if f.ErrCode == http2.ErrCodeRefusedStream {
						refused.Add(1)
					}
				case *http2.SettingsFrame:
					if !f.IsAck() {
						wmu.Lock()
						_ = fr.WriteSettingsAck()
						wmu.Unlock()
					}
				}
			}
		}()
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", runtimeapi.RuntimeService_Version_FullMethodName}, {":authority", "localhost"}, {"content-type", "application/grpc"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
		}
		stop := make(chan struct{})
		lat := latency(rt, stop)
		start := time.Now()
		sent := 0
		var werr error
		for i := range streams {
			wmu.Lock()
			werr = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: buf.Bytes(), EndHeaders: true})
			wmu.Unlock()
			if werr != nil {
				break
			}
			sent++
		}
		time.Sleep(time.Second)
		rss := p.rssMiB()
		t.Logf("HEADERS flood: %d of %d sent in %v, %d refused; during: RSS %.1f MiB, %d fds, %d goroutines",
			sent, streams, time.Since(start).Round(time.Millisecond), refused.Load(), rss, p.fds(), goroutines(metricsAddr))
		if sent <= streamLimit {
			t.Errorf("HEADERS flood: only %d streams sent, want more than the limit of %d: the write of stream %d failed: %v (last frame read: %v)",
				sent, streamLimit, sent+1, werr, lastFrame.Load())
		} else if werr != nil {
			t.Logf("HEADERS flood: the write of stream %d failed: %v (last frame read: %v)", sent+1, werr, lastFrame.Load())
		}
		if sent > streamLimit && refused.Load() == 0 {
			t.Errorf("HEADERS flood: %d streams sent on one connection and none refused, want those past %d refused", sent, streamLimit)
		}
		if rss > maxFloodRSSMiB {
			t.Errorf("HEADERS flood: RSS %.1f MiB, want at most %d MiB", rss, maxFloodRSSMiB)
		}
		_ = c.Close()
		<-readDone
		settled("HEADERS flood")
		close(stop)
		cs := lat()
		t.Logf("HEADERS flood: meanwhile %s", cs)
		if cs.fails > 0 {
			t.Errorf("HEADERS flood: %d of %d Version calls on another connection failed, want none", cs.fails, cs.n)
		}
	}

	// B: 20,000 connection attempts on the metrics port, at most 4,000 held
	// open by this test at once (its own descriptor limit)
	{
		const attempts, held, dialers = 20_000, 4_000, 400
		stop := make(chan struct{})
		lat := latency(rt, stop)
		var (
			mu       sync.Mutex
			open     []net.Conn
			ok, fail atomic.Int64
			next     atomic.Int64
			wg       sync.WaitGroup
			peakFDs  atomic.Int64
			peakRSS  atomic.Int64
		)
		sampleDone := make(chan struct{})
		go func() {
			defer close(sampleDone)
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if n := int64(p.fds()); n > peakFDs.Load() {
					peakFDs.Store(n)
				}
				if r := int64(p.rssMiB() * 1024); r > peakRSS.Load() {
					peakRSS.Store(r)
				}
			}
		}()
		start := time.Now()
		for range dialers {
			wg.Go(func() {
				for next.Add(1) <= attempts {
					c, err := net.DialTimeout("tcp", metricsAddr, 200*time.Millisecond)
					if err != nil {
						fail.Add(1)
						continue
					}
					ok.Add(1)
					_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
					mu.Lock()
					open = append(open, c)
					if len(open) > held {
						_ = open[0].Close()
						open = open[1:]
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		during := fmt.Sprintf("RSS %.1f MiB, %d fds", p.rssMiB(), p.fds())
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		settled("metrics flood")
		close(stop)
		<-sampleDone
		cs := lat()
		t.Logf("metrics flood: %d attempts in %v (%d connected, %d failed); at the end %s; peak %d fds, RSS %.1f MiB; meanwhile %s",
			attempts, elapsed.Round(time.Millisecond), ok.Load(), fail.Load(), during, peakFDs.Load(), float64(peakRSS.Load())/1024, cs)
		if peak, bound := peakFDs.Load(), int64(idleFDs+2*metricsConnCap+fdSlack); peak > bound {
			t.Errorf("metrics flood: peak %d fds, want at most %d (idle %d, two for each of the %d connections served, %d more)", peak, bound, idleFDs, metricsConnCap, fdSlack)
		}
		if cs.fails > 0 {
			t.Errorf("metrics flood: %d of %d Version calls failed, want none", cs.fails, cs.n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("Version after the floods: %v", err)
	}
}
