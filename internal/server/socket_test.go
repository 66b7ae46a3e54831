package server

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenUnixModes(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "run", "cri-guard", "s.sock")
	l, err := listenUnix(path, testLog())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o750 {
		t.Errorf("dir mode %v, want 0750", di.Mode().Perm())
	}
	si, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if si.Mode()&fs.ModeSocket == 0 || si.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want socket 0660", si.Mode())
	}
}

func TestListenUnixExistingPath(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string)
		wantErr string // empty: listening must succeed
	}{
		{name: "nothing there"},
		{name: "stale socket is replaced", prepare: func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}},
		{name: "live socket is refused", wantErr: "in use", prepare: func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}},
		{name: "symlink is refused", wantErr: "symlink", prepare: func(t *testing.T, path string) {
			target := path + ".target"
			if err := os.WriteFile(target, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "regular file is refused", wantErr: "not a socket", prepare: func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "directory is refused", wantErr: "not a socket", prepare: func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(shortDir(t), "s.sock")
			if tt.prepare != nil {
				tt.prepare(t, path)
			}
			before, _ := os.Lstat(path)
			l, err := listenUnix(path, testLog())
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("listen: %v", err)
				}
				l.Close()
				return
			}
			if err == nil {
				l.Close()
				t.Fatalf("listen succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q should contain %q and the path", err, tt.wantErr)
			}
			after, aerr := os.Lstat(path)
			if aerr != nil || before == nil || !os.SameFile(before, after) {
				t.Errorf("refused path was modified")
			}
		})
	}
}
