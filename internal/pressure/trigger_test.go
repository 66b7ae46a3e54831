package pressure

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTriggerSpec(t *testing.T) {
	tests := []struct {
		spec    string
		wantErr bool
	}{
		{spec: "some 150000 2000000"},
		{spec: "full  100000   10000000"},
		{spec: "some 150000", wantErr: true},
		{spec: "most 150000 2000000", wantErr: true},
		{spec: "some x 2000000", wantErr: true},
		{spec: "some 150000 100000", wantErr: true},
		{spec: "some 150000 20000000", wantErr: true},
		{spec: "some 0 2000000", wantErr: true},
		{spec: "some 3000000 2000000", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := ParseTriggerSpec(tc.spec)
			if (err != nil) != tc.wantErr {
				t.Errorf("ParseTriggerSpec(%q) error %v, want error %v", tc.spec, err, tc.wantErr)
			}
		})
	}
}

func TestTriggerMissingFile(t *testing.T) {
	if _, err := NewTrigger(filepath.Join(t.TempDir(), "memory.pressure"), "some 150000 2000000"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("NewTrigger on a missing file = %v, want not-exist", err)
	}
}

// TestTriggerRefusesRegularFile: a pressure file copied to disk (a
// --proc-root or --cgroup-root pointing at a fake tree) is refused, by
// NewTrigger and by Run, and its content is left as it was.
func TestTriggerRefusesRegularFile(t *testing.T) {
	const content = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	p := filepath.Join(t.TempDir(), "memory.pressure")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := NewTrigger(p, "some 150000 2000000")
	if !errors.Is(err, ErrNotPressureFile) || !strings.Contains(err.Error(), p) {
		t.Errorf("NewTrigger on a regular file = %v, want ErrNotPressureFile naming the path", err)
	}
	// Run checks the opened file again (the path may have changed since
	// NewTrigger): a trigger built for it must not write either.
	tr := &Trigger{path: p, spec: "some 150000 2000000"}
	if err := tr.Run(context.Background(), func() {}); !errors.Is(err, ErrNotPressureFile) {
		t.Errorf("Run on a regular file = %v, want ErrNotPressureFile", err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != content {
		t.Errorf("file after refused trigger = %q, %v; want it unchanged", got, err)
	}
}

// TestTriggerAcceptsKernelPressureFiles: the node's pressure file (procfs)
// and a root cgroup's memory.pressure (cgroup2) are accepted.
func TestTriggerAcceptsKernelPressureFiles(t *testing.T) {
	for _, p := range []string{"/proc/pressure/memory", "/sys/fs/cgroup/memory.pressure", "/sys/fs/cgroup/unified/memory.pressure"} {
		t.Run(p, func(t *testing.T) {
			if _, err := os.Stat(p); err != nil {
				t.Skipf("no %s on this host (no PSI, or no cgroup2 there): %v", p, err)
			}
			if _, err := NewTrigger(p, "some 150000 2000000"); err != nil {
				t.Errorf("NewTrigger(%s) = %v", p, err)
			}
		})
	}
}

// hostPSI returns /proc/pressure/memory, or skips when the kernel lacks PSI
// or refuses triggers to this process.
func hostPSI(t *testing.T) string {
	t.Helper()
	const p = "/proc/pressure/memory"
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no writable %s on this host: %v", p, err)
	}
	f.Close()
	return p
}

func TestTriggerRejectedWindow(t *testing.T) {
	p := hostPSI(t)
	// A 1 s window is refused without CAP_SYS_RESOURCE (windows must be
	// multiples of 2 s); with the capability the kernel accepts it.
	tr, err := NewTrigger(p, "some 150000 1000000")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = tr.Run(ctx, func() {})
	if err == nil {
		t.Skip("kernel accepted a 1 s window (process has CAP_SYS_RESOURCE)")
	}
	if !errors.Is(err, ErrTriggerRejected) {
		t.Errorf("Run = %v, want ErrTriggerRejected", err)
	}
}

func TestTriggerStopsOnCancel(t *testing.T) {
	p := hostPSI(t)
	tr, err := NewTrigger(p, "some 150000 2000000")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx, func() {}) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
}

func TestWidenTriggerSpec(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"some 50000 1000000", "some 100000 2000000", true},
		{"full 500000  500000", "full 2000000 2000000", true},
		{"some 100000 3000000", "some 133333 4000000", true},
		{"some 100000 2000000", "", false},
		{"most 1 2", "", false},
	} {
		got, ok := WidenTriggerSpec(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("WidenTriggerSpec(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
