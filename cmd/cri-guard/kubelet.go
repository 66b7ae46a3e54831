package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/sirupsen/logrus"
)

// kubeletName is the kubelet's process name (/proc/<pid>/comm, the
// binary's name as the kernel keeps it).
const kubeletName = "kubelet"

// kubeletStarts tells the API client when a kubelet process has started,
// from the processes that connect to the CRI socket (server's
// ProcessConnected): a kubelet's restart resets its status manager's
// cache, and the reports on the API need their bound armed again then
// (kube.Client.KubeletStarted).
//
// Why the CRI socket and not the API: a kubelet's start writes nothing to
// the API that a running kubelet does not also write (its Node status and
// Lease look the same, and the Node authorizer lets a node read none of
// the kubelet's events), whereas a new kubelet is a new process, and it
// connects to its runtime before it syncs any pod: the one signal that is
// certain and comes early enough. It costs one read of a small procfs file
// per root process that connects while it holds no connection, none per
// call. A kubelet built into another binary (its process not named
// kubelet) is not seen: its reports keep the bound from the report alone.
type kubeletStarts struct {
	// procRoot is cri-guard's own /proc, not the configured procRoot (a
	// stats tree, which may be the host's mounted elsewhere or a fake one):
	// SO_PEERCRED gives the pid in cri-guard's pid namespace, which its
	// own /proc shows.
	procRoot string
	started  func()
	log      *logrus.Entry

	mu  sync.Mutex
	pid int32 // the kubelet process last seen; 0 before the first
}

// connected is server.Config.ProcessConnected: a kubelet process not seen
// before is a start. The first one seen is one too: either the kubelet
// started after cri-guard, or it was running and reconnects after
// cri-guard's restart, when cri-guard has no report of an earlier kubelet
// to keep (a report's bound armed again once more is all it costs).
func (k *kubeletStarts) connected(pid int32) {
	if !isKubelet(k.procRoot, pid) {
		return
	}
	k.mu.Lock()
	prev := k.pid
	k.pid = pid
	k.mu.Unlock()
	if prev == pid {
		return // the same kubelet, its connections closed for idleness
	}
	k.log.WithFields(logrus.Fields{"pid": pid, "previous_pid": prev}).Info("kubelet process connected")
	k.started()
}

// isKubelet says whether the process pid (as procRoot shows it) is a
// kubelet; a process gone already is not.
func isKubelet(procRoot string, pid int32) bool {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(int(pid)), "comm"))
	return err == nil && string(bytes.TrimSpace(b)) == kubeletName
}
