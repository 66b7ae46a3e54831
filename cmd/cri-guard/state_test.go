package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/config"
)

// TestStateDirUnusable: a state directory cri-guard cannot open (real: its
// ".lock" a directory; a file where the directory should be) does not
// keep it from serving the kubelet: it starts, admits pods with their
// records in memory, says so in status (apart from the restore's
// degradation), and once the directory is usable it opens it and writes
// the records.
func TestStateDirUnusable(t *testing.T) {
	tests := []struct {
		name  string
		block func(dir string) error // makes dir unusable
		free  func(dir string) error // makes it usable again
		error string
	}{
		{".lock is a directory",
			func(dir string) error { return os.MkdirAll(filepath.Join(dir, ".lock"), 0o700) },
			func(dir string) error { return os.Remove(filepath.Join(dir, ".lock")) },
			"is a directory"},
		{"a file in its place",
			func(dir string) error { return os.WriteFile(dir, nil, 0o600) },
			os.Remove,
			"not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := startDaemon(t, func(o *options) {
				o.Config.HousekeepingInterval = config.Duration{Duration: 100 * time.Millisecond}
				if err := tt.block(o.Config.StateDir); err != nil {
					t.Fatal(err)
				}
			})
			socket, dir := d.opts.Config.AdminSocket, d.opts.Config.StateDir
			st, err := admin.Fetch(context.Background(), socket)
			if err != nil {
				t.Fatal(err)
			}
			if st.State == nil || st.State.Available || !strings.Contains(st.State.Error, tt.error) || st.Degraded != "" {
				t.Fatalf("state = %+v, degraded %q; want unavailable (%s), the restore done", st.State, st.Degraded, tt.error)
			}
			d.runPod(t, "web") // admitted with the store unavailable
			st, err = admin.Fetch(context.Background(), socket)
			if err != nil {
				t.Fatal(err)
			}
			if st.State.Unsaved == 0 || !strings.Contains(st.State.LastWriteError, "unavailable") {
				t.Fatalf("state after a pod = %+v, want its record unsaved", st.State)
			}
			var out, errOut bytes.Buffer
			if code := realMain([]string{"status", "--admin", socket}, &out, &errOut); code != 0 {
				t.Fatalf("status exit %d: %s", code, errOut.String())
			}
			for _, want := range []string{"STATE:", "records in memory only", "unsaved:"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("status table lacks %q:\n%s", want, out.String())
				}
			}

			if err := tt.free(dir); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second) // the first retry comes 5 s after start
			for {
				st, err = admin.Fetch(context.Background(), socket)
				if err != nil {
					t.Fatal(err)
				}
				if st.State.Available && st.State.Unsaved == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("state 30 s after the directory was freed: %+v", st.State)
				}
				time.Sleep(100 * time.Millisecond)
			}
			recs, err := checkpoint.Inspect(dir)
			if err != nil || len(recs) != 1 || recs[0].Pod.UID != "uid-web" {
				t.Fatalf("records on disk once open = %+v, %v; want web's", recs, err)
			}
		})
	}
}
