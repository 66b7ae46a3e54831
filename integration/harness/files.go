package harness

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
)

// memTotal is the MemTotal of the fake meminfo files the tests give
// cri-guard (WriteMeminfo; scripts/cluster.sh writes the same).
const memTotal = 16 << 30

// ShortTempDir is a t.TempDir-like directory with a short path (unix
// socket paths are limited to 108 bytes), removed at cleanup.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// WriteAtomic replaces the file at path with content by rename, so that a
// reader never sees half of it.
func WriteAtomic(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// WriteMeminfo replaces the fake /proc/meminfo at path with one of
// MemTotal whose MemFree and MemAvailable are available bytes.
func WriteMeminfo(t testing.TB, path string, available int64) {
	t.Helper()
	WriteAtomic(t, path, fmt.Sprintf(
		"MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\nBuffers:        0 kB\nCached:         0 kB\n",
		memTotal>>10, available>>10, available>>10))
}

// NewUID is a random 16-hex-digit id for pod UIDs and names.
func NewUID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
