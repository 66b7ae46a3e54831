// Command slowfs mounts a loopback (pass-through) FUSE file system of a
// backing directory whose fsync(2) and fdatasync(2), of files and of
// directories, sleep a fixed delay before the real fsync on the backing
// file: a state disk on which one fsync really takes a second or more,
// for measuring cri-guard with its state dir on a slow disk.
// Reads, writes, renames and the rest pass through at once.
//
//	slowfs -delay 1s [-dir-delay 1s] BACKING MOUNTPOINT
//
// The kernel holds a directory's lock through a FUSE directory fsync:
// creates and renames in it wait for each one under way (-dir-delay 0
// leaves directory fsyncs at the backing file system's speed).
//
// It runs in the foreground, prints "ready" once mounted, and unmounts on
// SIGTERM or SIGINT. It needs /dev/fuse and root (it mounts directly,
// without fusermount). A module of its own, so that the product's go.mod
// does not grow go-fuse.
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
	delay := flag.Duration("delay", time.Second, "how long each fsync of a file sleeps before the real one")
	dirDelay := flag.Duration("dir-delay", -1, "how long each fsync of a directory sleeps (default: -delay)")
	debug := flag.Bool("debug", false, "log every FUSE request")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: slowfs [-delay 1s] [-dir-delay 1s] BACKING MOUNTPOINT\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	if *dirDelay < 0 {
		*dirDelay = *delay
	}
	srv, err := mount(flag.Arg(0), flag.Arg(1), *delay, *dirDelay, *debug)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowfs:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	fmt.Printf("ready: %s on %s, fsync delay %v, of a directory %v\n", flag.Arg(0), flag.Arg(1), *delay, *dirDelay)
	served := make(chan struct{})
	go func() { srv.Wait(); close(served) }()
	select {
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "slowfs: %v: unmounting %s\n", s, flag.Arg(1))
		if err := srv.Unmount(); err != nil {
			fmt.Fprintln(os.Stderr, "slowfs: unmount:", err)
			os.Exit(1)
		}
	case <-served: // unmounted from outside (umount)
	}
}
