package server

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// How connections on the CRI socket are shared out, so that no local client
// can take the kubelet's place, whoever it runs as:
//
//   - A peer is who is on the other end, from SO_PEERCRED: a non-root uid as
//     a whole (all its processes together), or one process of root. The
//     kubelet runs as root, and so may a hostile client, so root is told
//     apart by pid: the kubelet is one process holding two connections.
//   - A peer holds at most MaxConnectionsPerPeer connections; more are
//     closed at once.
//   - At most MaxConnections are held in all. A connection that comes when
//     they are takes the place of the newest connection of the peer holding
//     the most, when that peer holds at least two more than the newcomer;
//     otherwise it is closed at once. So a peer that holds few connections
//     (the kubelet) always gets one while any other peer holds more: to
//     lock it out, a client needs about MaxConnections/3 processes of its
//     own, each holding three connections; a root user who can do that can
//     also stop cri-guard outright.
//
// A connection is always accepted or closed at once, never left waiting:
// a connection left in the kernel's queue would hold up every connection
// queued behind it, the kubelet's included.

// peerID is the identity connections are counted by.
type peerID struct {
	uid, pid int32 // pid is 0 for a non-root uid: all its processes count together
	unknown  bool  // SO_PEERCRED failed: all such connections count together
}

func (p peerID) String() string {
	switch {
	case p.unknown:
		return "unknown"
	case p.pid == 0:
		return fmt.Sprintf("uid %d", p.uid)
	default:
		return fmt.Sprintf("uid %d pid %d", p.uid, p.pid)
	}
}

// peerOf returns the peer of a unix connection from its SO_PEERCRED.
func peerOf(c net.Conn) (peerID, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peerID{}, fmt.Errorf("peer credentials: %T is not a unix connection", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peerID{}, fmt.Errorf("peer credentials: %w", err)
	}
	var (
		cred *syscall.Ucred
		cerr error
	)
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return peerID{}, fmt.Errorf("peer credentials: %w", err)
	}
	if cerr != nil {
		return peerID{}, fmt.Errorf("peer credentials: %w", cerr)
	}
	if cred.Uid != 0 {
		return peerID{uid: int32(cred.Uid)}, nil
	}
	return peerID{pid: cred.Pid}, nil
}

// connVerdict is whether a connection is kept at accept, or why not.
type connVerdict int

const (
	admitted connVerdict = iota
	// refusedPeerLimit: the peer holds MaxConnectionsPerPeer already.
	refusedPeerLimit
	// refusedFull: MaxConnections are held and no peer holds two more
	// than this one.
	refusedFull
)

func (r connVerdict) String() string {
	switch r {
	case refusedPeerLimit:
		return "peer-limit"
	case refusedFull:
		return "full"
	default:
		return "admitted"
	}
}

// refusalLogEvery spaces the log lines about refused connections: a flood
// must not turn into a flood of log lines.
const refusalLogEvery = 10 * time.Second

// peerListener wraps the CRI socket's listener with the limits above.
type peerListener struct {
	net.Listener
	maxConns, maxPerPeer int
	peerOf               func(net.Conn) (peerID, error)
	log                  *logrus.Entry
	now                  func() time.Time
	// processConnected, if set, is told a root process's first connection
	// (Config.ProcessConnected); processDisconnected its last one's close
	// (Config.ProcessDisconnected)
	processConnected    func(pid int32)
	processDisconnected func(pid int32)

	mu      sync.Mutex
	total   int
	peers   map[peerID][]*peerConn // oldest first
	refused uint64
	lastLog time.Time
}

func newPeerListener(l net.Listener, maxConns, maxPerPeer int, log *logrus.Entry) *peerListener {
	return &peerListener{
		Listener: l, maxConns: maxConns, maxPerPeer: maxPerPeer,
		peerOf: peerOf, log: log, now: time.Now,
		peers: map[peerID][]*peerConn{},
	}
}

// Accept returns the next connection within the limits; the others are
// closed here, without delay.
func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := l.peerOf(c)
		if err != nil {
			p = peerID{unknown: true}
		}
		pc, victim, why := l.admit(c, p)
		if victim != nil {
			_ = victim.Conn.Close()
		}
		if why == admitted {
			if pc.firstOfProcess && l.processConnected != nil {
				l.processConnected(p.pid)
			}
			return pc, nil
		}
		_ = c.Close()
	}
}

// admit decides on a connection of p: the connection to return, a
// connection that must be closed to make room for it, or why it is refused.
func (l *peerListener) admit(c net.Conn, p peerID) (pc *peerConn, victim *peerConn, why connVerdict) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := len(l.peers[p])
	switch {
	case held >= l.maxPerPeer:
		why = refusedPeerLimit
	case l.total >= l.maxConns:
		victim = l.heaviestNewest(held + 2)
		if victim == nil {
			why = refusedFull
			break
		}
		victim.released = true
		l.remove(victim)
	}
	if why != admitted {
		l.refused++
		if now := l.now(); now.Sub(l.lastLog) >= refusalLogEvery {
			l.lastLog = now
			l.log.WithFields(logrus.Fields{
				"peer": p.String(), "reason": why.String(), "held": held,
				"connections": l.total, "refused_total": l.refused,
			}).Warn("connection refused on the CRI socket")
		}
		return nil, nil, why
	}
	pc = &peerConn{Conn: c, l: l, peer: p, firstOfProcess: held == 0 && p.pid != 0 && !p.unknown}
	l.peers[p] = append(l.peers[p], pc)
	l.total++
	if victim != nil {
		if now := l.now(); now.Sub(l.lastLog) >= refusalLogEvery {
			l.lastLog = now
			l.log.WithFields(logrus.Fields{
				"peer": p.String(), "closed_peer": victim.peer.String(),
				"connections": l.total,
			}).Warn("connection closed on the CRI socket to make room for a peer holding fewer")
		}
	}
	return pc, victim, admitted
}

// heaviestNewest returns the newest connection of the peer holding the most
// connections, when it holds at least atLeast; nil otherwise.
func (l *peerListener) heaviestNewest(atLeast int) *peerConn {
	var most []*peerConn
	for _, cs := range l.peers {
		if len(cs) > len(most) {
			most = cs
		}
	}
	if len(most) < atLeast {
		return nil
	}
	return most[len(most)-1]
}

// remove drops c from the counts and says whether c was its peer's last
// connection; l.mu is held.
func (l *peerListener) remove(c *peerConn) (last bool) {
	cs := l.peers[c.peer]
	for i, x := range cs {
		if x == c {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(l.peers, c.peer)
	} else {
		l.peers[c.peer] = cs
	}
	l.total--
	return len(cs) == 0
}

// held returns the connections held in all and by p.
func (l *peerListener) held(p peerID) (total, byPeer int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, len(l.peers[p])
}

// peerConn is an accepted connection; closing it frees its place.
type peerConn struct {
	net.Conn
	l        *peerListener
	peer     peerID
	released bool // guarded by l.mu
	// firstOfProcess: a root process's connection made while it held none
	firstOfProcess bool
}

func (c *peerConn) Close() error {
	c.l.mu.Lock()
	last := false
	if !c.released {
		c.released = true
		last = c.l.remove(c)
	}
	c.l.mu.Unlock()
	err := c.Conn.Close()
	if last && c.peer.pid != 0 && !c.peer.unknown && c.l.processDisconnected != nil {
		c.l.processDisconnected(c.peer.pid)
	}
	if errors.Is(err, net.ErrClosed) {
		// closed already to make room for another peer
		return nil
	}
	return err
}
