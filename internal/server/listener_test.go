package server

import (
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// step is one connection arriving (peer set) or an earlier one closing by
// its owner (close set, the index of the arrival).
type step struct {
	peer  peerID
	close int // 1-based index of the arrival to close; 0: an arrival
	want  connVerdict
	// evicts is the 1-based index of the arrival closed to make room; 0: none
	evicts int
}

func TestPeerListenerAdmit(t *testing.T) {
	kubelet := peerID{pid: 100}
	root := peerID{pid: 200}
	other := peerID{pid: 300}
	user := peerID{uid: 1000}
	tests := []struct {
		name                 string
		maxConns, maxPerPeer int
		steps                []step
		wantTotal            int
	}{
		{name: "a peer over its limit is refused, others are not", maxConns: 10, maxPerPeer: 2, steps: []step{
			{peer: root}, {peer: root}, {peer: root, want: refusedPeerLimit}, {peer: kubelet},
		}, wantTotal: 3},
		{name: "a non-root uid counts as one peer", maxConns: 10, maxPerPeer: 2, steps: []step{
			{peer: user}, {peer: user}, {peer: user, want: refusedPeerLimit},
		}, wantTotal: 2},
		{name: "a closed connection frees its place", maxConns: 10, maxPerPeer: 2, steps: []step{
			{peer: root}, {peer: root}, {close: 1}, {peer: root},
		}, wantTotal: 2},
		{name: "at the cap a lighter peer takes the heaviest peer's newest place", maxConns: 4, maxPerPeer: 4, steps: []step{
			{peer: root}, {peer: root}, {peer: root}, {peer: root},
			{peer: kubelet, evicts: 4}, {peer: kubelet, evicts: 3},
			// two each now: nobody holds two more than the kubelet
			{peer: kubelet, want: refusedFull},
		}, wantTotal: 4},
		{name: "at the cap a peer within one of the heaviest is refused", maxConns: 5, maxPerPeer: 5, steps: []step{
			{peer: root}, {peer: root}, {peer: root}, {peer: other}, {peer: other},
			{peer: root, want: refusedFull}, {peer: other, want: refusedFull},
			{peer: kubelet, evicts: 3},
		}, wantTotal: 5},
		{name: "an evicted connection closed later by its owner frees nothing twice", maxConns: 2, maxPerPeer: 2, steps: []step{
			{peer: root}, {peer: root}, {peer: kubelet, evicts: 2}, {close: 2}, {peer: other, want: refusedFull},
		}, wantTotal: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newPeerListener(nil, tt.maxConns, tt.maxPerPeer, logrus.NewEntry(logrus.New()))
			var arrivals []*peerConn // by arrival, nil when refused
			var raws []net.Conn
			for i, s := range tt.steps {
				if s.close > 0 {
					if err := arrivals[s.close-1].Close(); err != nil {
						t.Fatalf("step %d: close: %v", i, err)
					}
					continue
				}
				c, peerSide := net.Pipe()
				t.Cleanup(func() { _ = c.Close(); _ = peerSide.Close() })
				raws = append(raws, peerSide)
				pc, victim, why := l.admit(c, s.peer)
				if why != s.want {
					t.Fatalf("step %d (%v): %v, want %v", i, s.peer, why, s.want)
				}
				if (pc == nil) != (why != admitted) {
					t.Fatalf("step %d: connection %v with verdict %v", i, pc, why)
				}
				var wantVictim *peerConn
				if s.evicts > 0 {
					wantVictim = arrivals[s.evicts-1]
				}
				if victim != wantVictim {
					t.Fatalf("step %d: made room by closing %v, want %v", i, victim, wantVictim)
				}
				if victim != nil {
					_ = victim.Conn.Close()
				}
				arrivals = append(arrivals, pc)
			}
			if total, _ := l.held(peerID{}); total != tt.wantTotal {
				t.Errorf("%d connections held, want %d", total, tt.wantTotal)
			}
		})
	}
}

// TestPeerOfUnixConn: SO_PEERCRED of a connection from this process names
// it: as root by pid, as another user by uid alone.
func TestPeerOfUnixConn(t *testing.T) {
	l, err := net.Listen("unix", shortDir(t)+"/p.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := net.DialTimeout("unix", l.Addr().String(), 5*time.Second)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := peerOf(c)
	if err != nil {
		t.Fatal(err)
	}
	want := peerID{uid: int32(os.Getuid())}
	if os.Getuid() == 0 {
		want = peerID{pid: int32(os.Getpid())}
	}
	if p != want {
		t.Errorf("peer %v, want %v", p, want)
	}
	if _, err := peerOf(&net.TCPConn{}); err == nil {
		t.Error("peer of a TCP connection: no error")
	}
}

// TestProcessConnected: a root process is announced at its first
// connection, not at the others it opens while it holds one, and again
// once it has held none (a restarted kubelet's new process has a new pid;
// cmd tells the kubelet's processes apart by pid). Its going is announced
// when the last connection it held closes, not before.
func TestProcessConnected(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a process is told apart by its pid only when it runs as root")
	}
	raw, err := net.Listen("unix", shortDir(t)+"/p.sock")
	if err != nil {
		t.Fatal(err)
	}
	l := newPeerListener(raw, 16, 8, logrus.NewEntry(logrus.New()))
	var mu sync.Mutex
	var seen, gone []int32
	l.processConnected = func(pid int32) { mu.Lock(); seen = append(seen, pid); mu.Unlock() }
	l.processDisconnected = func(pid int32) { mu.Lock(); gone = append(gone, pid); mu.Unlock() }
	defer l.Close()
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	connect := func(n int) []net.Conn {
		var cs []net.Conn
		for range n {
			c, err := net.DialTimeout("unix", raw.Addr().String(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.Close() // the client's end; the server's is what counts
			cs = append(cs, <-accepted)
		}
		return cs
	}
	announced := func() []int32 { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
	left := func() []int32 { mu.Lock(); defer mu.Unlock(); return slices.Clone(gone) }
	me := int32(os.Getpid())
	first := connect(3)
	if got := announced(); !slices.Equal(got, []int32{me}) {
		t.Fatalf("after 3 connections of one process: announced %v, want [%d]", got, me)
	}
	for _, c := range first[:2] {
		c.Close()
	}
	again := connect(1) // it still holds one
	if got := announced(); len(got) != 1 {
		t.Fatalf("a connection of a process holding one: announced %v, want [%d]", got, me)
	}
	first[2].Close()
	if got := left(); len(got) != 0 {
		t.Fatalf("a process still holding a connection: announced gone %v", got)
	}
	again[0].Close()
	again[0].Close() // a second close is not a second going
	if got := left(); !slices.Equal(got, []int32{me}) {
		t.Fatalf("after its last connection closed: announced gone %v, want [%d]", got, me)
	}
	if total, _ := l.held(peerID{pid: me}); total != 0 {
		t.Fatalf("%d connections held, want 0", total)
	}
	connect(1)
	if got := announced(); !slices.Equal(got, []int32{me, me}) {
		t.Fatalf("a connection of a process holding none again: announced %v, want [%d %d]", got, me, me)
	}
}
