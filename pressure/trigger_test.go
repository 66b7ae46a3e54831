package pressure

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestNewTrigger(t *testing.T) {
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
			_, err := NewTrigger("/proc/pressure/memory", tc.spec)
			if (err != nil) != tc.wantErr {
				t.Errorf("NewTrigger(%q) error %v, want error %v", tc.spec, err, tc.wantErr)
			}
		})
	}
}

func TestTriggerMissingFile(t *testing.T) {
	tr, err := NewTrigger(filepath.Join(t.TempDir(), "memory.pressure"), "some 150000 2000000")
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Run(context.Background(), func() {}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Run on a missing file = %v, want not-exist", err)
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
