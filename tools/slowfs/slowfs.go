package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// slowNode is a loopback node whose fsync of a file sleeps delay, and of
// a directory dirDelay, before the real fsync on the backing file: a state
// disk on which one fsync takes that long.
//
// The kernel's FUSE holds a directory's lock through each FSYNCDIR
// request (fuse_dir_fsync), so creates and renames in that directory wait
// for every directory fsync under way: concurrent writers of one directory
// go one dirDelay at a time (a journaling file system on a slow device
// batches them into one commit instead). -dir-delay 0 leaves that out.
type slowNode struct {
	*fs.LoopbackNode
	delay, dirDelay time.Duration
}

var (
	_ fs.NodeWrapChilder    = (*slowNode)(nil)
	_ fs.NodeFsyncer        = (*slowNode)(nil)
	_ fs.NodeOpendirHandler = (*slowNode)(nil)
)

// WrapChild makes every node of the tree a slowNode.
func (n *slowNode) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if l, ok := ops.(*fs.LoopbackNode); ok {
		return &slowNode{LoopbackNode: l, delay: n.delay, dirDelay: n.dirDelay}
	}
	return ops
}

// Fsync is fsync(2) and fdatasync(2) of a file (a node's Fsync is called
// before its handle's).
func (n *slowNode) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if s, ok := f.(fs.FileFsyncer); ok {
		if errno := sleep(ctx, n.delay); errno != 0 {
			return errno
		}
		return s.Fsync(ctx, flags)
	}
	if s, ok := f.(fs.FileFsyncdirer); ok {
		return s.Fsyncdir(ctx, flags) // a slowDir: it sleeps
	}
	return syscall.ENOTSUP
}

// OpendirHandle wraps the loopback's directory handle so that its Fsyncdir
// (fsync(2) of a directory: a rename made durable) is slow too.
func (n *slowNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return fh, fuseFlags, errno
	}
	d, ok := fh.(dirHandle)
	if !ok {
		return fh, fuseFlags, errno // not the loopback's: left as it is
	}
	return &slowDir{dirHandle: d, delay: n.dirDelay}, fuseFlags, 0
}

// dirHandle is what the loopback's directory handle does.
type dirHandle interface {
	fs.FileReaddirenter
	fs.FileReleasedirer
	fs.FileSeekdirer
	fs.FileFsyncdirer
}

// slowDir is a directory handle whose Fsyncdir sleeps first.
type slowDir struct {
	dirHandle
	delay time.Duration
}

func (d *slowDir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if errno := sleep(ctx, d.delay); errno != 0 {
		return errno
	}
	return d.dirHandle.Fsyncdir(ctx, flags)
}

// sleep waits d, or until the kernel cancels the request (EINTR).
func sleep(ctx context.Context, d time.Duration) syscall.Errno {
	if d <= 0 {
		return 0
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-ctx.Done():
		return syscall.EINTR
	}
}

// mount mounts a loopback of backing on mountpoint whose fsyncs take
// delay (of a directory: dirDelay) more than the backing file system's.
// The caller unmounts (Server.Unmount).
func mount(backing, mountpoint string, delay, dirDelay time.Duration, debug bool) (*fuse.Server, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("stat backing dir %q: %w", backing, err)
	}
	lr := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root := &slowNode{LoopbackNode: &fs.LoopbackNode{RootData: lr}, delay: delay, dirDelay: dirDelay}
	lr.RootNode = root
	srv, err := fs.Mount(mountpoint, root, &fs.Options{MountOptions: fuse.MountOptions{
		FsName:      "slowfs:" + backing,
		Name:        "slowfs",
		DirectMount: true, // as root, without fusermount (not installed here)
		Debug:       debug,
	}})
	if err != nil {
		return nil, fmt.Errorf("mount slowfs on %q: %w", mountpoint, err)
	}
	return srv, nil
}
