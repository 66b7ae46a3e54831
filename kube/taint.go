package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	// present is the taint as last read or written; nil: not known (at
	// start, and again at every heartbeat: it is read and reconciled)
	present *bool
	// unavailable says why the taint cannot be set (patch forbidden);
	// it is not tried again
	unavailable string
	checked     time.Time // when it was last reconciled
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
// taint left by a crash is confirmed or removed by what this run sees; it
// returns how long until it is due again.
func (c *Client) writeTaint(ctx context.Context) time.Duration {
	c.mu.Lock()
	t := &c.ts
	now := c.now()
	if t.srv == nil || t.unavailable != "" || c.ns.want == nil {
		c.mu.Unlock()
		return time.Hour
	}
	if !t.checked.IsZero() && now.Sub(t.checked) >= c.heartbeat {
		t.present = nil // read it again: someone may have changed it
	}
	want := c.ns.want.MemoryPressure
	if t.present != nil && *t.present == want {
		d := t.checked.Add(c.heartbeat).Sub(now)
		c.mu.Unlock()
		return max(d, 0)
	}
	if t.next.After(now) {
		d := t.next.Sub(now)
		c.mu.Unlock()
		return d
	}
	srv, effect := t.srv, t.effect
	c.mu.Unlock()

	changed, err := setTaint(ctx, srv, c.node, effect, want)
	c.mu.Lock()
	defer c.mu.Unlock()
	if changed || err != nil {
		c.note(opTaint, err)
	}
	switch {
	case err == nil:
		t.present, t.checked, t.tries, t.next = &want, c.now(), 0, time.Time{}
		if changed {
			c.log.WithFields(logrus.Fields{"taint": TaintKey, "effect": effect, "set": want}).Info("node taint changed")
		}
		if c.ns.want.MemoryPressure != want {
			return 0
		}
		return c.heartbeat
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		t.unavailable = err.Error()
		c.log.WithError(err).WithField("taint", TaintKey).
			Warn("node taint unavailable: this identity may not patch the Node (contrib/rbac.yaml); the scheduler will keep sending pods cri-guard refuses")
		return time.Hour
	default:
		t.tries++
		t.next = c.now().Add(c.backoff(t.tries))
		if t.tries == 1 || t.tries%10 == 0 {
			c.log.WithError(err).WithFields(logrus.Fields{"op": opTaint, "tries": t.tries}).Warn("cannot set the node taint: retrying")
		}
		return c.backoff(t.tries)
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
	srv, effect := t.srv, t.effect
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	changed, err := setTaint(ctx, srv, c.node, effect, false)
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

// setTaint reads the node and, when its taints differ from what is
// wanted, writes them: a JSON merge patch of spec.taints with the node's
// resourceVersion as precondition (a conflict is retried with a fresh
// read), as the node lifecycle controller's taint helpers do. Only
// cri-guard's key is added or removed, whatever its effect was.
func setTaint(ctx context.Context, srv server, node string, effect corev1.TaintEffect, want bool) (changed bool, err error) {
	for attempt := 0; ; attempt++ {
		n, err := srv.getNode(ctx, node)
		if err != nil {
			return false, fmt.Errorf("get node %q: %w", node, err)
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == TaintKey })
		if want {
			taints = append(taints, corev1.Taint{Key: TaintKey, Effect: effect})
		}
		if slices.EqualFunc(taints, n.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) {
			return false, nil
		}
		if taints == nil {
			taints = []corev1.Taint{}
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": n.ResourceVersion},
			"spec":     map[string]any{"taints": taints},
		})
		if err != nil {
			return false, err
		}
		err = srv.patchNode(ctx, node, "", types.MergePatchType, patch)
		if err == nil {
			return true, nil
		}
		if !apierrors.IsConflict(err) || attempt >= 3 {
			return false, fmt.Errorf("patch node %q taints: %w", node, err)
		}
	}
}
