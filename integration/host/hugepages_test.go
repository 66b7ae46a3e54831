//go:build integration

package host

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// hugePagesAdded is how many 2 MiB pages the test reserves: 512 MiB, so
// that the threshold can sit a quarter of a gigabyte away from what each
// computation gives (other work on the host moves MemAvailable meanwhile).
const hugePagesAdded = 256

// TestHugepageAwareEviction: with the host's own /proc and /sys and the
// default kubeletCompatibility (1.37), cri-guard counts a huge page pool
// as not available, as the 1.37 kubelet does. cri-guard starts with a
// hard memory.available threshold half a pool under MemAvailable, which
// the node does not meet (a threshold met at start would be refused as a
// mistake); then a pool of 2 MiB pages is reserved through
// /proc/sys/vm/nr_hugepages, and the threshold is met: the BestEffort pod
// admitted before is chosen for eviction, a new BestEffort RunPodSandbox
// is refused, memory.available is not less the pool twice
// (the kernel already keeps the pool out of MemAvailable), and status
// shows the pool.
func TestHugepageAwareEviction(t *testing.T) {
	env := needRuntime(t)
	removePodsAtCleanup(t, env)
	const planned = hugePagesAdded << 21
	avail := memAvailable(t)
	threshold := avail - planned/2
	adminSocket := filepath.Join(harness.ShortTempDir(t), "admin.sock")
	// dryRun: the threshold is met on the real host, where cri-guard would
	// otherwise stop any sandbox it adopts from the shared containerd;
	// admission refuses all the same
	cfg := writeConfig(t, fmt.Sprintf(`
dryRun: true
housekeepingInterval: 1s
evictionHard: {memory.available: "%d"}
evictionPressureTransitionPeriod: 3s
psiTrigger: ""
metricsAddress: ""
adminSocket: %s
`, threshold, adminSocket))
	g := startGuard(t, env, cfg...)
	// a BestEffort pod admitted before the pool: the one to evict once
	// the pool is counted
	vuid := harness.NewUID(t)
	victim := "be-victim-" + vuid[:6]
	env.Crictl(t, g.Socket, "runp", writeJSON(t, t.TempDir(), vuid+".json", qosPodConfig(victim, vuid, "besteffort")))
	pool := reserveHugePages(t, hugePagesAdded)
	if pool.added != planned {
		t.Skipf("the kernel found %d of the %d bytes of huge pages asked for", pool.added, planned)
	}

	// the next housekeeping pass sets the condition
	var observed float64
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := harness.Status(guardBin, adminSocket)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Conditions) > 0 {
			if st.HugePages == nil || st.HugePages.Bytes != pool.total || !st.HugePages.Subtracted {
				t.Errorf("status huge pages %+v, want %d bytes taken off memory.available", st.HugePages, pool.total)
			}
			for _, s := range st.Signals {
				if s.Signal == "memory.available" {
					observed = s.Value
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no MemoryPressure within 15s with memory.available<%d (MemAvailable was %d, pool %d): status %+v\n%s",
				threshold, avail, pool.total, st, g.LogTail())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// not the pool off MemAvailable a second time: about MemAvailable less
	// the pool (within half a pool), not less two pools
	if low := float64(avail - pool.added - pool.added/2); observed < low {
		t.Errorf("memory.available %.0f, below MemAvailable %d less one and a half pools: the pool was taken off twice", observed, avail)
	}

	// the eviction the 1.37 kubelet would make (dry run: chosen and
	// logged, not stopped)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		full, _ := os.ReadFile(g.Log)
		if chosen := dryRunVictims(string(full)); len(chosen) > 0 {
			if chosen[0] != victim {
				t.Errorf("dry run chose %q to evict, want the BestEffort %q\n%s", chosen[0], victim, g.LogTail())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no eviction chosen within 15s of MemoryPressure\n%s", g.LogTail())
		}
	}

	uid := harness.NewUID(t)
	pc := qosPodConfig("be-hugepages-"+uid[:6], uid, "besteffort")
	out, err := env.CrictlErr(g.Socket, "runp", writeJSON(t, t.TempDir(), uid+".json", pc))
	if err == nil {
		t.Fatalf("BestEffort pod admitted with the huge page pool counted as available: %s", out)
	}
	for _, want := range []string{"ResourceExhausted", "The node had condition: [MemoryPressure]", "memory.available"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}

	table, err := exec.Command(guardBin, "status", "--admin", adminSocket).CombinedOutput()
	if err != nil {
		t.Fatalf("cri-guard status: %v\n%s", err, table)
	}
	if !bytes.Contains(table, []byte("huge pages:")) || !bytes.Contains(table, []byte("taken off memory.available")) {
		t.Errorf("status table does not show the pool:\n%s", table)
	}
}

// dryRunVictims are the pods cri-guard's log says a dry run would evict,
// in order.
func dryRunVictims(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="dry run: would evict pod"`) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "pod="); ok {
				out = append(out, strings.Trim(v, `"`))
			}
		}
	}
	return out
}

// hugePool is the host's huge page pool once the test reserved its pages.
type hugePool struct {
	added int64 // bytes the test reserved
	total int64 // the whole pool, every size, as cadvisor reads it
}

// reserveHugePages adds n 2 MiB pages to the host's pool and gives the old
// count back at cleanup; it skips when the kernel has no hugetlb, the pool
// cannot be written, or the kernel could not find the pages.
func reserveHugePages(t *testing.T, n int64) hugePool {
	t.Helper()
	const nr = "/proc/sys/vm/nr_hugepages"
	if _, err := os.Stat("/sys/kernel/mm/hugepages/hugepages-2048kB"); err != nil {
		t.Skipf("no 2 MiB huge pages on this kernel: %v", err)
	}
	b, err := os.ReadFile(nr)
	if err != nil {
		t.Skipf("no hugetlb: %v", err)
	}
	old, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", nr, err)
	}
	// nr_hugepages is the default size's pool; the test needs it to be 2 MiB
	if size := meminfoKB(t, "Hugepagesize"); size != 2048 {
		t.Skipf("default huge page size is %d kB, not 2 MiB", size)
	}
	if err := os.WriteFile(nr, []byte(strconv.FormatInt(old+n, 10)), 0o644); err != nil {
		t.Skipf("cannot reserve huge pages: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(nr, []byte(strconv.FormatInt(old, 10)), 0o644); err != nil {
			t.Errorf("give back the huge pages: write %d to %s: %v", old, nr, err)
		}
	})
	b, err = os.ReadFile(nr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", nr, err)
	}
	if got-old < n/2 {
		t.Skipf("the kernel found %d of %d huge pages", got-old, n)
	}
	p := hugePool{added: (got - old) << 21}
	dirs, err := filepath.Glob("/sys/kernel/mm/hugepages/hugepages-*kB")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		var kb, pages int64
		if _, err := fmt.Sscanf(filepath.Base(d), "hugepages-%dkB", &kb); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		b, err := os.ReadFile(filepath.Join(d, "nr_hugepages"))
		if err != nil {
			t.Fatal(err)
		}
		if pages, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		p.total += pages * kb << 10
	}
	return p
}

// memAvailable is the host's MemAvailable in bytes.
func memAvailable(t *testing.T) int64 { return meminfoKB(t, "MemAvailable") << 10 }

// meminfoKB reads one /proc/meminfo field, in kB.
func meminfoKB(t *testing.T, key string) int64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			t.Fatalf("meminfo %s: %v", key, err)
		}
		return n
	}
	t.Fatalf("meminfo has no %s", key)
	return 0
}
