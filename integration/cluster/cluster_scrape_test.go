//go:build integration

package cluster

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The scrape recorder: with CRI_GUARD_SCRAPE_DIR set, a pressure test
// records what a Prometheus scraping the cluster's cri-guard would have
// stored over its episode, so that the alert rules of contrib/monitoring are
// tested over real series (contrib/monitoring/scrapegen turns a recording
// into promtool's input). Unset, it does nothing.

var (
	// guardMetricsAddr is where cluster.sh's cri-guard serves its metrics
	// (GUARD_METRICS there).
	guardMetricsAddr = "127.0.0.1:19713"
	// scrapeEvery is the recorder's scrape interval: finer than any
	// promtool test interval the converter resamples it to.
	scrapeEvery = 5 * time.Second
)

// scrapeRecording is one test's recording, DIR/<test name>/scrapes.txt: a
// header, then blocks, each starting with a comment line the text
// exposition format ignores:
//
//	# scrape <unix ms> ok          followed by the exposition as served
//	# scrape <unix ms> error <why> (Prometheus' up is 0 for it)
//	# mark <unix ms> <name>        an instant of the episode (pressure, calm)
//
// The scrapes are in time order, stamped when they started (as Prometheus
// stamps its samples), and so are the marks; a mark made while a scrape
// waited for its answer comes before that scrape's block.
type scrapeRecording struct {
	mu   sync.Mutex
	f    *os.File
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// recordScrapes starts the recorder for t when CRI_GUARD_SCRAPE_DIR is set
// (nil otherwise, whose methods do nothing). It scrapes at once, then every
// scrapeEvery, until stopScrapes or the end of the test.
func recordScrapes(t *testing.T) *scrapeRecording {
	t.Helper()
	dir := os.Getenv("CRI_GUARD_SCRAPE_DIR")
	if dir == "" {
		return nil
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "scrapes.txt"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "# cri-guard scrape recording of %s: target %s, every %s\n", t.Name(), guardMetricsAddr, scrapeEvery)
	r := &scrapeRecording{f: f, stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	t.Cleanup(func() {
		r.stopScrapes()
		if err := f.Close(); err != nil {
			t.Error(err)
		}
		t.Logf("scrapes recorded in %s", f.Name())
	})
	return r
}

func (r *scrapeRecording) run() {
	defer close(r.done)
	cl := http.Client{Timeout: scrapeEvery}
	tick := time.NewTicker(scrapeEvery)
	defer tick.Stop()
	for {
		r.scrape(&cl)
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
	}
}

// scrape writes one block; an answer other than a 200 is a failed scrape,
// as Prometheus counts it.
func (r *scrapeRecording) scrape(cl *http.Client) {
	at := time.Now()
	body, err := func() ([]byte, error) {
		resp, err := cl.Get("http://" + guardMetricsAddr + "/metrics")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %s", resp.Status)
		}
		return b, err
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		fmt.Fprintf(r.f, "# scrape %d error %s\n", at.UnixMilli(), strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	fmt.Fprintf(r.f, "# scrape %d ok\n", at.UnixMilli())
	r.f.Write(body)
	if len(body) > 0 && body[len(body)-1] != '\n' {
		r.f.Write([]byte("\n"))
	}
}

// mark records that the episode reached name now.
func (r *scrapeRecording) mark(name string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.f, "# mark %d %s\n", time.Now().UnixMilli(), name)
}

// stopScrapes takes a last scrape and ends the recording (before a cleanup
// that restarts cri-guard, whose scrapes are no part of the episode).
func (r *scrapeRecording) stopScrapes() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		r.scrape(&http.Client{Timeout: scrapeEvery})
	})
}

// TestClusterScrapeRecorder: the recorder itself, against a stand-in
// /metrics on loopback (no cluster): nothing without CRI_GUARD_SCRAPE_DIR;
// with it, timestamped scrapes in order, the failed ones (an error status,
// the endpoint gone) as errors, and the marks between them.
func TestClusterScrapeRecorder(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "# TYPE cri_guard_evictions_total counter\ncri_guard_evictions_total{signal=\"memory.available\"} %d\n", n.Load())
	}))
	addr, every := guardMetricsAddr, scrapeEvery
	guardMetricsAddr, scrapeEvery = srv.Listener.Addr().String(), 50*time.Millisecond
	defer func() { guardMetricsAddr, scrapeEvery = addr, every }()

	t.Setenv("CRI_GUARD_SCRAPE_DIR", "")
	if rec := recordScrapes(t); rec != nil {
		t.Fatal("a recorder without CRI_GUARD_SCRAPE_DIR")
	}
	var none *scrapeRecording
	none.mark("x") // no recorder: nothing, and no panic
	none.stopScrapes()

	dir := t.TempDir()
	t.Setenv("CRI_GUARD_SCRAPE_DIR", dir)
	var path string
	t.Run("episode", func(t *testing.T) {
		rec := recordScrapes(t)
		path = filepath.Join(dir, t.Name(), "scrapes.txt")
		time.Sleep(200 * time.Millisecond)
		rec.mark("pressure")
		time.Sleep(200 * time.Millisecond)
		srv.Close() // cri-guard gone
		time.Sleep(150 * time.Millisecond)
		rec.mark("calm")
	})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if want := "# cri-guard scrape recording of TestClusterScrapeRecorder/episode: target " + srv.Listener.Addr().String() + ", every 50ms"; lines[0] != want {
		t.Errorf("header %q, want %q", lines[0], want)
	}
	block := regexp.MustCompile(`^# (scrape|mark) (\d+) (ok|error .+|pressure|calm)$`)
	var kinds []string
	last := map[string]int64{}
	for _, l := range lines[1:] {
		m := block.FindStringSubmatch(l)
		if m == nil {
			if !strings.HasPrefix(l, "# TYPE ") && !strings.HasPrefix(l, "cri_guard_evictions_total{") {
				t.Errorf("line %q", l)
			}
			continue
		}
		var at int64
		fmt.Sscan(m[2], &at)
		if at < last[m[1]] {
			t.Errorf("%q before the %s above", l, m[1])
		}
		last[m[1]] = at
		k := m[3]
		if strings.HasPrefix(k, "error") {
			k = "error"
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != k {
			kinds = append(kinds, k)
		}
	}
	// the second scrape answered 503; the last ones found the endpoint gone
	got := strings.Join(kinds, " ")
	if !regexp.MustCompile(`^ok error ok pressure ok (error )?calm error$`).MatchString(got) {
		t.Errorf("blocks %q, want ok error ok pressure ok error calm error\n%s", got, b)
	}
	if !strings.Contains(string(b), "status 503") {
		t.Errorf("the 503 not recorded as the scrape's error:\n%s", b)
	}
}
