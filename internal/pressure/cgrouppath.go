package pressure

import (
	"fmt"
	"path"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// CgroupPath turns a CRI cgroup parent into a group path relative to a
// cgroup hierarchy's mount point, beginning with "/".
//
// A cgroupfs parent ("kubepods/burstable/pod<uid>" or "/kubepods/pod<uid>")
// is used as it is. A systemd parent given as a bare slice name, as the kubelet
// sends it ("kubepods-burstable-pod<uid>.slice"), is expanded as systemd
// places slices: every '-' separated prefix is a parent slice, giving
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice".
// A systemd path that already contains '/' is used as it is. Paths that are
// empty or escape the hierarchy ("..") are rejected.
func CgroupPath(parent string) (string, error) {
	if parent == "" {
		return "", fmt.Errorf("cgroup parent %q: empty", parent)
	}
	p := parent
	if !strings.Contains(p, "/") && strings.HasSuffix(p, ".slice") {
		expanded, err := expandSlice(p)
		if err != nil {
			return "", fmt.Errorf("cgroup parent %q: %w", parent, err)
		}
		p = expanded
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return "", fmt.Errorf("cgroup parent %q: escapes the cgroup root", parent)
		}
	}
	p = path.Clean(p)
	if p == "/" {
		return "", fmt.Errorf("cgroup parent %q: names the root cgroup", parent)
	}
	if err := cgroup2.VerifyGroupPath(p); err != nil {
		return "", fmt.Errorf("cgroup parent %q: %w", parent, err)
	}
	return p, nil
}

// expandSlice expands a systemd slice name into its path under the root
// slice, as systemd's unit_name_to_path / libcontainer ExpandSlice do.
func expandSlice(slice string) (string, error) {
	name := strings.TrimSuffix(slice, ".slice")
	if name == "" || name == "-" {
		return "/", nil
	}
	if strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return "", fmt.Errorf("invalid slice name %q", slice)
	}
	var b strings.Builder
	prefix := ""
	for _, part := range strings.Split(name, "-") {
		b.WriteString("/")
		b.WriteString(prefix)
		b.WriteString(part)
		b.WriteString(".slice")
		prefix += part + "-"
	}
	return b.String(), nil
}
