package unixsock

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestListenSocketDirectory: an existing socket directory that someone
// other than root or cri-guard's user could change is fixed when its mode
// is all that is wrong, and refused otherwise.
func TestListenSocketDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the cases chown the directory to other users and groups")
	}
	const dirMode fs.FileMode = 0o750
	tests := []struct {
		name     string
		mode     fs.FileMode // of the existing directory
		uid, gid int
		wantErr  string      // empty: listening must succeed
		wantMode fs.FileMode // of the directory after
		wantWarn bool
	}{
		{name: "root's, not writable by others: kept", mode: 0o755, wantMode: 0o755},
		{name: "writable by root's group: kept", mode: 0o770, wantMode: 0o770},
		{name: "writable by everyone: fixed", mode: 0o777, wantMode: dirMode, wantWarn: true},
		{name: "writable by others: fixed", mode: 0o702, wantMode: dirMode, wantWarn: true},
		{name: "writable by a non-root group: fixed", mode: 0o775, gid: 4242, wantMode: dirMode, wantWarn: true},
		{name: "readable by a non-root group: kept", mode: 0o750, gid: 4242, wantMode: 0o750},
		{name: "owned by another user: refused", mode: 0o755, uid: 4242, wantErr: "owned by uid 4242", wantMode: 0o755},
		{name: "shared sticky directory: refused", mode: 0o777 | fs.ModeSticky, wantErr: "shared", wantMode: 0o777 | fs.ModeSticky},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(shortDir(t), "run")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, tt.uid, tt.gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tt.mode); err != nil {
				t.Fatal(err)
			}
			logger, hook := logtest.NewNullLogger()
			l, err := Listen(filepath.Join(dir, "s.sock"), dirMode, 0o660, logrus.NewEntry(logger))
			if l != nil {
				defer l.Close()
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("listen: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("listen: %v, want an error with %q", err, tt.wantErr)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() & (fs.ModePerm | fs.ModeSticky); got != tt.wantMode {
				t.Errorf("directory mode %v after, want %v", got, tt.wantMode)
			}
			if warned := len(hook.AllEntries()) > 0; warned != tt.wantWarn {
				t.Errorf("warned %v (%v), want %v", warned, hook.AllEntries(), tt.wantWarn)
			}
		})
	}
}

// TestListenSocketDirectoryNotADirectory: a file where the directory
// should be is an error, not a panic or a chmod of the file.
func TestListenSocketDirectoryNotADirectory(t *testing.T) {
	file := filepath.Join(shortDir(t), "run")
	if err := os.WriteFile(file, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	logger, _ := logtest.NewNullLogger()
	if _, err := Listen(filepath.Join(file, "s.sock"), 0o750, 0o660, logrus.NewEntry(logger)); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("listen under a file: %v, want not a directory", err)
	}
}

func shortDir(t *testing.T) string {
	t.Helper()
	// unix socket paths are limited to 108 bytes: t.TempDir() can be too long.
	dir, err := os.MkdirTemp("", "us")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
