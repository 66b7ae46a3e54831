// Command memhog makes real memory pressure: it maps a file larger than
// the memory limit of its cgroup and keeps writing to every page, so the
// kernel must reclaim and refault page cache all the time and the cgroup's
// memory PSI rises. The end-to-end tests run it in a container (mounted from
// the host) to have cri-guard evict a pod on a real PSI trigger.
//
//	memhog -file /data/hog -size 400
package main

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	path := flag.String("file", "/tmp/memhog", "file to map")
	sizeMiB := flag.Int("size", 400, "size of the mapping in MiB")
	flag.Parse()
	if err := run(*path, int64(*sizeMiB)<<20); err != nil {
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
