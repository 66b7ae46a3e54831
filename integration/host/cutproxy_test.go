//go:build integration

package host

import (
	"bytes"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cri-guard/cri-guard/integration/harness"
)

// cutProxy relays unix socket connections from cri-guard to containerd's
// CRI socket. Armed with a marker, it cuts cri-guard's side of the
// connection whose request bytes carry it, right after forwarding them:
// cri-guard loses the call mid-way, while containerd, whose side stays open
// (its answers read and dropped), completes it.
type cutProxy struct {
	socket string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	marker []byte        // armed while non-nil
	cut    chan struct{} // closed when the armed connection is cut
	conns  []*proxyConn
	closed bool // the cleanup has closed conns
}

type proxyConn struct {
	down, up net.Conn    // cri-guard's side, containerd's side
	drain    atomic.Bool // cut: containerd's bytes are dropped
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	p := &cutProxy{socket: filepath.Join(harness.ShortTempDir(t), "proxy.sock")}
	ln, err := net.Listen("unix", p.socket)
	if err != nil {
		t.Fatal(err)
	}
	p.ln = ln
	p.wg.Go(func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", target)
			if err != nil {
				down.Close()
				continue
			}
			c := &proxyConn{down: down, up: up}
			p.mu.Lock()
			if p.closed { // accepted as the cleanup closed the others
				p.mu.Unlock()
				down.Close()
				up.Close()
				return
			}
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			p.wg.Go(func() { p.toRuntime(c) })
			p.wg.Go(func() { p.fromRuntime(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.closed = true
		for _, c := range p.conns {
			c.down.Close()
			c.up.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// arm makes the next connection that forwards marker be cut; the channel
// is closed when it is.
func (p *cutProxy) arm(marker string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.cut = []byte(marker), make(chan struct{})
	return p.cut
}

// closeCut closes containerd's side of the cut connections.
func (p *cutProxy) closeCut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if c.drain.Load() {
			c.up.Close()
		}
	}
}

// hit reports whether the armed marker is in tail+b (tail: the end of the
// previous chunk, so a marker split between reads is found), and disarms.
func (p *cutProxy) hit(tail *[]byte, b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marker == nil {
		*tail = nil
		return false
	}
	data := append(slices.Clone(*tail), b...)
	if bytes.Contains(data, p.marker) {
		p.marker = nil
		return true
	}
	*tail = slices.Clone(data[max(0, len(data)-len(p.marker)+1):])
	return false
}

func (p *cutProxy) toRuntime(c *proxyConn) {
	buf := make([]byte, 32<<10)
	var tail []byte
	for {
		n, err := c.down.Read(buf)
		if n > 0 {
			hit := p.hit(&tail, buf[:n])
			if hit {
				c.drain.Store(true) // before containerd can answer
			}
			if _, werr := c.up.Write(buf[:n]); werr != nil {
				break
			}
			if hit {
				p.mu.Lock()
				close(p.cut)
				p.mu.Unlock()
				c.down.Close() // containerd's side stays open: fromRuntime drains it
				return
			}
		}
		if err != nil {
			break
		}
	}
	c.down.Close()
	c.up.Close()
}

func (p *cutProxy) fromRuntime(c *proxyConn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.up.Read(buf)
		if n > 0 && !c.drain.Load() {
			if _, werr := c.down.Write(buf[:n]); werr != nil && !c.drain.Load() {
				break
			}
		}
		if err != nil {
			break
		}
	}
	c.down.Close()
	c.up.Close()
}
