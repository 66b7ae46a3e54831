// Command memhog makes real memory pressure, in one of two ways.
//
// File mode (the default) maps a file larger than the memory limit of its
// cgroup and keeps writing to every page, so the kernel must reclaim and
// refault page cache all the time and the cgroup's memory PSI rises. The
// end-to-end tests run it in a container (mounted from the host) to have
// cri-guard evict a pod on a real PSI trigger.
//
//	memhog -file /data/hog -size 400
//
// Anonymous mode allocates private anonymous memory at a fixed rate and
// touches every page, so the cgroup's usage grows at that rate with no page
// cache to reclaim: the runaway pod of cri-guard-bench race. It stops
// growing at -size MiB (0: never) and then sleeps.
//
//	memhog -anon -prefill 300 -rate 200 -size 0
//
// A Go program exits on SIGTERM, even as PID 1 of its container (it has a
// handler); -ignore-sigterm makes it a runaway that ignores SIGTERM, as
// many programs do as PID 1, so that a stop waits for the grace period.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	path := flag.String("file", "/tmp/memhog", "file to map (file mode)")
	sizeMiB := flag.Int("size", 400, "size of the mapping in MiB; in -anon mode where to stop growing (0: never)")
	anon := flag.Bool("anon", false, "allocate anonymous memory at -rate instead of mapping a file")
	rate := flag.Float64("rate", 100, "growth in MB/s (10^6 bytes) in -anon mode")
	prefill := flag.Int("prefill", 0, "in -anon mode, MiB touched at once before growing at -rate")
	ignoreTerm := flag.Bool("ignore-sigterm", false, "ignore SIGTERM, as a program that does not handle it (PID 1 of its container) does: a stop then waits for its grace period and SIGKILL")
	flag.Parse()
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	var err error
	if *anon {
		err = runAnon(*rate*1e6, int64(*prefill)<<20, int64(*sizeMiB)<<20)
	} else {
		err = run(*path, int64(*sizeMiB)<<20)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "memhog:", err)
		os.Exit(1)
	}
}

func run(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("truncate %q: %w", path, err)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap %q: %w", path, err)
	}
	fmt.Printf("memhog: touching %d MiB of %s from %s\n", size>>20, path, time.Now().Format(time.RFC3339Nano))
	for pass := byte(1); ; pass++ {
		for i := 0; i < len(b); i += 4096 {
			b[i] = pass
		}
	}
}

// anonChunk is what runAnon maps at a time.
const anonChunk = 64 << 20

// runAnon touches prefill bytes at once, then grows by bytesPerSecond:
// every tick it touches the pages that the elapsed time allows (paced
// against the start, so a slow tick is caught up), mapping fresh anonymous
// chunks as needed.
func runAnon(bytesPerSecond float64, prefill, limit int64) error {
	if bytesPerSecond <= 0 {
		return fmt.Errorf("rate must be positive")
	}
	const page = 4096
	if limit > 0 {
		prefill = min(prefill, limit)
	}
	var chunk []byte
	var off int
	var touched int64
	touch := func(want int64) error {
		for touched < want {
			if off >= len(chunk) {
				b, err := syscall.Mmap(-1, 0, anonChunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
				if err != nil {
					return fmt.Errorf("mmap anonymous: %w", err)
				}
				chunk, off = b, 0
			}
			chunk[off] = 1
			off += page
			touched += page
		}
		return nil
	}
	if err := touch(prefill); err != nil {
		return err
	}
	start := time.Now()
	fmt.Printf("memhog: prefilled %d MiB, anonymous growth at %.0f MB/s from %s\n", prefill>>20, bytesPerSecond/1e6, start.Format(time.RFC3339Nano))
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		want := prefill + int64(time.Since(start).Seconds()*bytesPerSecond)
		if limit > 0 {
			want = min(want, limit)
		}
		if err := touch(want); err != nil {
			return err
		}
	}
	return nil
}
