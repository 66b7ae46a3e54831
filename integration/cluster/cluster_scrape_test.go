//go:build integration

package cluster

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scrape recorder: with CRI_GUARD_SCRAPE_DIR set, a pressure test
// records what a Prometheus scraping the cluster's cri-guard would have
// stored over its episode, so that the alert rules of contrib/monitoring are
// tested over real series (contrib/monitoring/scrapegen turns a recording
// into promtool's input). Unset, it does nothing.

const (
	// guardMetricsAddr is where cluster.sh's cri-guard serves its metrics
	// (GUARD_METRICS there).
	guardMetricsAddr = "127.0.0.1:19713"
	// scrapeEvery is the recorder's scrape interval: finer than any
	// promtool test interval the converter resamples it to.
	scrapeEvery = 5 * time.Second
)

// scrapeRecording is one test's recording, DIR/<test name>/scrapes.txt: a
// header, then blocks in time order, each starting with a comment line the
// text exposition format ignores:
//
//	# scrape <unix ms> ok          followed by the exposition as served
//	# scrape <unix ms> error <why> (Prometheus' up is 0 for it)
//	# mark <unix ms> <name>        an instant of the episode (pressure, calm)
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
