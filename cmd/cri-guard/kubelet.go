package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// kubeletName is the kubelet's process name (/proc/<pid>/comm, the
// binary's name as the kernel keeps it).
const kubeletName = "kubelet"

// kubeletStarts tells the API client when a kubelet process has started,
// from the processes that connect to the CRI socket (server's
// ProcessConnected): a kubelet's restart resets its status manager's
// cache, and the reports on the API need their bound armed again then
// (kube.Client.KubeletStarted). It also tells when that kubelet has
// exited (its last connection closed, server's ProcessDisconnected, and
// its process gone): the reports it replaced are written again while no
// kubelet runs (kube.Client.KubeletStopped).
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
	stopped  func() // nil: exits are not told
	log      *logrus.Entry
	// exitChecks: when the process whose last connection closed is looked
	// at (delays, one after the other); nil is defaultExitChecks
	exitChecks []time.Duration

	mu   sync.Mutex
	pid  int32 // the kubelet process last seen; 0 before the first
	gone int32 // the kubelet process last told exited
}

// defaultExitChecks: an exiting process closes its sockets a moment before
// /proc shows it dead (a zombie, then nothing), and a kubelet that lives
// on may close idle connections: its process is looked at a few times
// within ~3 s of its last connection's close, then left alone.
var defaultExitChecks = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}

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

// disconnected is server.Config.ProcessDisconnected: when it is the
// kubelet last seen whose last connection closed, its process is looked
// at off the caller's goroutine (exitChecks), and its exit, once seen, is
// told once. A new kubelet connecting meanwhile ends the looking: its
// start is told instead.
func (k *kubeletStarts) disconnected(pid int32) {
	k.mu.Lock()
	ours := pid == k.pid && pid != k.gone
	k.mu.Unlock()
	if !ours || k.stopped == nil {
		return
	}
	checks := k.exitChecks
	if checks == nil {
		checks = defaultExitChecks
	}
	go func() {
		for _, d := range checks {
			time.Sleep(d)
			if !processGone(k.procRoot, pid) {
				continue
			}
			k.mu.Lock()
			tell := pid == k.pid && pid != k.gone
			if tell {
				k.gone = pid
			}
			k.mu.Unlock()
			if tell {
				k.log.WithField("pid", pid).Info("kubelet process exited")
				k.stopped()
			}
			return
		}
	}()
}

// processGone says whether the process pid (as procRoot shows it) has
// exited: no longer there, a zombie, or its pid taken by another program.
func processGone(procRoot string, pid int32) bool {
	if !isKubelet(procRoot, pid) {
		return true
	}
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(int(pid)), "stat"))
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces and parentheses
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false // unreadable: taken for alive, as a process that is
	}
	st := b[i+2]
	return st == 'Z' || st == 'X'
}

// isKubelet says whether the process pid (as procRoot shows it) is a
// kubelet; a process gone already is not.
func isKubelet(procRoot string, pid int32) bool {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(int(pid)), "comm"))
	return err == nil && string(bytes.TrimSpace(b)) == kubeletName
}
