package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// TaintKey is the key of cri-guard's node taint. It is its own: a node may
// not change its own taints (NodeRestriction), and the node lifecycle
// controller removes node.kubernetes.io/memory-pressure whenever the
// kubelet's MemoryPressure is False.
const TaintKey = "cri-guard.io/memory-pressure"

// opTaint is the taint's op label in Observer.APIWrite.
const opTaint = "node-taint"

// TaintConfig turns the node taint on.
type TaintConfig struct {
	// Effect is the taint's effect (NoSchedule, PreferNoSchedule,
	// NoExecute).
	Effect corev1.TaintEffect
	// Kubeconfig is an identity allowed to get and patch Nodes; empty: the
	// client's own.
	Kubeconfig string
}

// stopTimeout bounds the taint's removal on a clean stop.
const stopTimeout = 5 * time.Second

// taintState is what the client knows and wants of its taint (Client.mu).
type taintState struct {
	srv    server // nil: no taint
	effect corev1.TaintEffect
	// present is the taint as last seen in the Node's cache or written;
	// nil: not known yet
	present *bool
	// writtenRV is the Node's resourceVersion the last write returned: a
	// cached Node older than that says nothing of the taint (the watch
	// has not brought the write yet)
	writtenRV uint64
	// unavailable says why the taint cannot be set (patch forbidden);
	// it is not tried again
	unavailable string
	tries       int
	next        time.Time
}

// TaintState says what status shows of the taint: "off", "on" (while
// cri-guard sees pressure), "off (no pressure)", or "unavailable: <why>".
func (c *Client) taintStatus() string {
	t := &c.ts
	switch {
	case t.srv == nil:
		return "off"
	case t.unavailable != "":
		return "unavailable: " + t.unavailable
	case t.present == nil:
		return "enabled, not reconciled yet"
	case *t.present:
		return "set (" + string(t.effect) + ")"
	default:
		return "not set"
	}
}

// writeTaint makes the node's taint match the pressure cri-guard sees
// (writer goroutine): nothing before the first evaluation, so that a
// taint left by a crash is confirmed or removed by what this run sees. It
// is decided from the Node's cache, never a periodic read: a taint someone
// else changes comes with the watch, which pokes the writer. It returns
// how long until it is due again.
func (c *Client) writeTaint(ctx context.Context) time.Duration {
	c.mu.Lock()
	t := &c.ts
	if t.srv == nil || t.unavailable != "" || c.ns.want == nil {
		c.mu.Unlock()
		return time.Hour
	}
	n := c.cachedNode()
	if n == nil {
		// not synced yet, or no Node: its arrival pokes the writer
		c.mu.Unlock()
		return time.Hour
	}
	want := c.ns.want.MemoryPressure
	if t.writtenRV == 0 || nodeResourceVersion(n) >= t.writtenRV {
		// the cache has seen the last write: it is the truth
		if !taintsDiffer(n, t.effect, want) {
			t.present = &want
			c.mu.Unlock()
			return time.Hour
		}
		has := !taintsDiffer(n, t.effect, true)
		t.present = &has
	} else if t.present != nil && *t.present == want {
		// written, and the watch has not brought it back yet
		c.mu.Unlock()
		return time.Hour
	}
	if now := c.now(); t.next.After(now) {
		c.mu.Unlock()
		return t.next.Sub(now)
	}
	srv, effect := t.srv, t.effect
	c.mu.Unlock()

	changed, rv, err := setTaint(ctx, srv, c.node, n, effect, want)
	c.mu.Lock()
	defer c.mu.Unlock()
	if changed || err != nil {
		c.note(opTaint, err)
	}
	switch {
	case err == nil:
		t.present, t.tries, t.next = &want, 0, time.Time{}
		if changed {
			t.writtenRV = rv
			c.log.WithFields(logrus.Fields{"taint": TaintKey, "effect": effect, "set": want}).Info("node taint changed")
		}
		if c.ns.want.MemoryPressure != want {
			return 0
		}
		return time.Hour
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		t.unavailable = err.Error()
		c.log.WithError(err).WithField("taint", TaintKey).
			Warn("node taint unavailable: this identity may not patch the Node (contrib/rbac.yaml); the scheduler will keep sending pods cri-guard refuses")
		return time.Hour
	default:
		// the write may have landed all the same (a deadline, a stop, a
		// connection lost under it): not known until the Node's cache
		// says, and a stop removes it whatever it was
		t.present = nil
		t.tries++
		d := c.backoff(t.tries)
		t.next = c.now().Add(d)
		if t.tries == 1 || t.tries%10 == 0 {
			c.log.WithError(err).WithFields(logrus.Fields{"op": opTaint, "tries": t.tries}).Warn("cannot set the node taint: retrying")
		}
		return d
	}
}

// removeTaint takes the taint off on a clean stop, bounded in time (the
// writer's context has ended).
func (c *Client) removeTaint() {
	c.mu.Lock()
	t := &c.ts
	if t.srv == nil || t.unavailable != "" || (t.present != nil && !*t.present) {
		c.mu.Unlock()
		return
	}
	srv, effect, n := t.srv, t.effect, c.cachedNode()
	if n != nil && (t.present == nil || t.writtenRV != 0 && nodeResourceVersion(n) < t.writtenRV) {
		// a write whose outcome is not known, or the cache has not seen
		// the last taint written: a patch built from it might find
		// nothing to remove
		n = nil
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	// a Node never cached (or cached before the last write) is read,
	// once, on the way out
	changed, _, err := setTaint(ctx, srv, c.node, n, effect, false)
	c.mu.Lock()
	defer c.mu.Unlock()
	if changed || err != nil {
		c.note(opTaint, err)
	}
	if err != nil {
		c.log.WithError(err).WithField("taint", TaintKey).Warn("cannot remove the node taint on stop: the next start removes it")
		return
	}
	no := false
	t.present = &no
	if changed {
		c.log.WithField("taint", TaintKey).Info("node taint removed on stop")
	}
}

// taintsDiffer says whether the node's taints differ from what is wanted:
// cri-guard's key with effect, once, when want, else not at all.
func taintsDiffer(n *corev1.Node, effect corev1.TaintEffect, want bool) bool {
	_, differ := wantedTaints(n, effect, want)
	return differ
}

// wantedTaints are the node's taints with cri-guard's key removed, and
// added with effect when want; differ says whether they are not the
// node's.
func wantedTaints(n *corev1.Node, effect corev1.TaintEffect, want bool) (taints []corev1.Taint, differ bool) {
	taints = slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == TaintKey })
	if want {
		taints = append(taints, corev1.Taint{Key: TaintKey, Effect: effect})
	}
	return taints, !slices.EqualFunc(taints, n.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value })
}

// nodeResourceVersion is the node's resourceVersion as a number (etcd's
// revision); 0 when it is not one.
func nodeResourceVersion(n *corev1.Node) uint64 {
	v, _ := strconv.ParseUint(n.ResourceVersion, 10, 64)
	return v
}

// setTaint writes the taints wanted over those of n (the cached Node; nil:
// read it), when they differ: a JSON merge patch of spec.taints with n's
// resourceVersion as precondition, as the node lifecycle controller's
// taint helpers do; a conflict (the cache was behind) is retried with a
// fresh read, the only read of the Node not from the cache. Only
// cri-guard's key is added or removed, whatever its effect was. rv is the
// written Node's resourceVersion.
func setTaint(ctx context.Context, srv server, name string, n *corev1.Node, effect corev1.TaintEffect, want bool) (changed bool, rv uint64, err error) {
	for attempt := 0; ; attempt++ {
		if n == nil {
			if n, err = srv.getNode(ctx, name); err != nil {
				return false, 0, fmt.Errorf("get node %q: %w", name, err)
			}
		}
		taints, differ := wantedTaints(n, effect, want)
		if !differ {
			return false, 0, nil
		}
		if taints == nil {
			taints = []corev1.Taint{}
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
			"spec":     map[string]any{"taints": taints},
		})
		if err != nil {
			return false, 0, err
		}
		out, err := srv.patchNode(ctx, name, "", types.MergePatchType, patch)
		if err == nil {
			return true, nodeResourceVersion(out), nil
		}
		if !apierrors.IsConflict(err) || attempt >= 3 {
			return false, 0, fmt.Errorf("patch node %q taints: %w", name, err)
		}
		n = nil
	}
}
