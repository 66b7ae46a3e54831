package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layerBuilder writes one image layer as an in-memory tar with explicit
// entries: every entry has mtime 0 and no owner names, parents are created
// before their children and each directory once.
type layerBuilder struct {
	buf  bytes.Buffer
	tw   *tar.Writer
	dirs map[string]bool
	err  error
}

func newLayer() *layerBuilder {
	l := &layerBuilder{dirs: map[string]bool{}}
	l.tw = tar.NewWriter(&l.buf)
	return l
}

func clean(name string) string { return strings.Trim(path.Clean("/"+name), "/") }

func (l *layerBuilder) header(h *tar.Header) {
	if l.err != nil {
		return
	}
	h.ModTime = time.Unix(0, 0)
	h.Format = tar.FormatPAX
	l.err = l.tw.WriteHeader(h)
}

// dir adds a directory (and its missing parents, mode 0755, owned by root).
func (l *layerBuilder) dir(name string, mode int64, uid, gid int) {
	name = clean(name)
	if name == "" || name == "." || l.dirs[name] {
		return
	}
	if parent := path.Dir(name); parent != "." {
		l.dir(parent, 0o755, 0, 0)
	}
	l.dirs[name] = true
	l.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: gid})
}

// file adds a regular file owned by root.
func (l *layerBuilder) file(name string, data []byte, mode int64) {
	name = clean(name)
	l.dir(path.Dir(name), 0o755, 0, 0)
	l.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))})
	if l.err == nil {
		_, l.err = l.tw.Write(data)
	}
}

// hardlink adds name as a hard link to target, an entry written before.
func (l *layerBuilder) hardlink(name, target string) {
	name = clean(name)
	l.dir(path.Dir(name), 0o755, 0, 0)
	l.header(&tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: clean(target), Mode: 0o755})
}

// layer closes the tar and returns it as an OCI gzip layer, compressed once.
func (l *layerBuilder) layer() (v1.Layer, error) {
	if l.err == nil {
		l.err = l.tw.Close()
	}
	if l.err != nil {
		return nil, fmt.Errorf("build layer: %w", l.err)
	}
	raw := l.buf.Bytes()
	diffID, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed) // header without mtime: deterministic
	if err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	digest, _, err := v1.SHA256(bytes.NewReader(gz.Bytes()))
	if err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	return &gzLayer{raw: raw, gz: gz.Bytes(), diffID: diffID, digest: digest}, nil
}

// gzLayer is a finished layer held in memory, compressed and uncompressed.
type gzLayer struct {
	raw, gz        []byte
	diffID, digest v1.Hash
}

var _ v1.Layer = (*gzLayer)(nil)

func (g *gzLayer) Digest() (v1.Hash, error) { return g.digest, nil }
func (g *gzLayer) DiffID() (v1.Hash, error) { return g.diffID, nil }
func (g *gzLayer) Size() (int64, error)     { return int64(len(g.gz)), nil }
func (g *gzLayer) MediaType() (types.MediaType, error) {
	return types.OCILayer, nil
}
func (g *gzLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(g.gz)), nil
}
func (g *gzLayer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(g.raw)), nil
}

var lddLine = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// sharedLibs returns the host paths of the ELF interpreter and the shared
// libraries of a dynamic executable, or nothing for a static one.
func sharedLibs(binary string) []string {
	out, err := exec.Command("ldd", binary).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("not a dynamic executable")) {
		return nil
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		if m := lddLine.FindStringSubmatch(line); m != nil {
			libs = append(libs, m[1])
		}
	}
	return libs
}

// busybox holds what every busybox-based layer is made of, read once.
type busybox struct {
	binary  []byte
	libs    map[string][]byte // path in the image -> content
	libList []string          // sorted keys of libs
	applets []string          // e.g. bin/sh, usr/bin/wget
}

func loadBusybox(binary string) (*busybox, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read busybox %q: %w", binary, err)
	}
	b := &busybox{binary: data, libs: map[string][]byte{}}
	for _, lib := range sharedLibs(binary) {
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return nil, fmt.Errorf("resolve library %q: %w", lib, err)
		}
		content, err := os.ReadFile(real)
		if err != nil {
			return nil, fmt.Errorf("read library %q: %w", lib, err)
		}
		b.libs[lib] = content
		b.libList = append(b.libList, lib)
	}
	out, err := exec.Command(binary, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("list applets of %q: %w", binary, err)
	}
	for _, a := range strings.Fields(string(out)) {
		if a != "bin/busybox" {
			b.applets = append(b.applets, a)
		}
	}
	if len(b.applets) == 0 {
		return nil, fmt.Errorf("list applets of %q: none", binary)
	}
	return b, nil
}

const (
	basePasswd = "root:x:0:0:root:/root:/bin/sh\n" +
		"daemon:x:1:1:daemon:/usr/sbin:/bin/false\n" +
		"www-data:x:33:33:www-data:/var/www:/bin/false\n" +
		"nobody:x:65534:65534:nobody:/home:/bin/false\n"
	baseGroup = "root:x:0:\ndaemon:x:1:\nwww-data:x:33:\nusers:x:100:\nnogroup:x:65534:\n"
	ipcsShell = "#!/bin/sh\n# minimal ipcs: shm segments of this IPC namespace\ncat /proc/sysvipc/shm\n"
)

// layer starts a busybox root filesystem. Applets are hard links, as in the
// upstream busybox image: masking /bin/ls (critest MaskedPaths) must not mask
// the shell, which a symlink would.
func (b *busybox) layer(extraPasswd, extraGroup string) *layerBuilder {
	l := newLayer()
	l.file("/bin/busybox", b.binary, 0o755)
	for _, lib := range b.libList {
		l.file(lib, b.libs[lib], 0o755)
	}
	for _, a := range b.applets {
		l.hardlink("/"+a, "/bin/busybox")
	}
	l.file("/usr/bin/ipcs", []byte(ipcsShell), 0o755) // not a Debian busybox applet; critest HostIpc
	for _, d := range []string{"/tmp", "/var/tmp"} {
		l.dir(d, 0o1777, 0, 0)
	}
	for _, d := range []string{"/root", "/home", "/var/run", "/var/log", "/proc", "/sys", "/dev", "/etc", "/usr/sbin", "/var/www"} {
		mode := int64(0o755)
		if d == "/root" {
			mode = 0o700
		}
		l.dir(d, mode, 0, 0)
	}
	l.file("/etc/passwd", []byte(basePasswd+extraPasswd), 0o644)
	l.file("/etc/group", []byte(baseGroup+extraGroup), 0o644)
	return l
}
