package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFsyncIsSlow mounts slowfs in t.TempDir() and does what the
// checkpoint store does (write a temp file, fsync it, rename it, fsync the
// directory): each fsync takes at least the delay (a lower bound that the
// sleep guarantees, not a timing that can flake), and the data reaches the
// backing directory.
func TestFsyncIsSlow(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE here (%v): slowfs cannot mount", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("slowfs mounts directly (mount(2), no fusermount): needs root")
	}
	const delay = 200 * time.Millisecond
	backing, mnt := t.TempDir(), t.TempDir()
	srv, err := mount(backing, mnt, delay, delay, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})

	f, err := os.Create(filepath.Join(mnt, ".rec.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("record"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	fileSync := time.Since(start)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, ".rec.tmp"), filepath.Join(mnt, "rec")); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	start = time.Now()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	dirSync := time.Since(start)
	t.Logf("fsync of a file %v, of the directory %v (delay %v)", fileSync, dirSync, delay)
	if fileSync < delay || dirSync < delay {
		t.Fatalf("fsync of a file took %v, of the directory %v: want each >= %v", fileSync, dirSync, delay)
	}
	if b, err := os.ReadFile(filepath.Join(backing, "rec")); err != nil || string(b) != "record" {
		t.Fatalf("backing file = %q, %v; want %q", b, err, "record")
	}
}
