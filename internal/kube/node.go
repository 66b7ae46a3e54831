package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// NodeConditionType is the node condition cri-guard owns: its own view of
// memory pressure, next to the kubelet's MemoryPressure, which it never
// touches (as node-problem-detector adds conditions of its own).
const NodeConditionType corev1.NodeConditionType = "CriGuardMemoryPressure"

// defaultHeartbeat is how often the condition's LastHeartbeatTime is
// refreshed while nothing changes: the kubelet's node status report
// period (nodeStatusReportFrequency), since nothing reads this condition's
// heartbeat more often than the kubelet's own. A change is written at once.
const defaultHeartbeat = 5 * time.Minute

// minHeartbeat is the shortest heartbeat Config.Heartbeat may ask for.
const minHeartbeat = 10 * time.Second

// newNodeInformer watches the Node named in lw alone (the Node authorizer
// lets a node get, list and watch its own), with no resync: nothing is
// done on a timer from it.
func newNodeInformer(lw cache.ListerWatcher) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	// the managed fields and the image list are most of a Node and are
	// never read
	_ = inf.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			n.ManagedFields, n.Status.Images = nil, nil
		}
		return obj, nil
	})
	return inf
}

// cachedNode is the client's Node from the cache; nil when the cache has
// none (not synced yet, or no such Node).
func (c *Client) cachedNode() *corev1.Node {
	obj, ok, err := c.nodes.GetStore().GetByKey(c.node)
	if err != nil || !ok {
		return nil
	}
	n, _ := obj.(*corev1.Node)
	return n
}

// NodePressure is cri-guard's view of the node's memory pressure, as the
// eviction manager's evaluation has it.
type NodePressure struct {
	// MemoryPressure: the eviction manager has the MemoryPressure
	// condition (a threshold met, or met within the transition period).
	MemoryPressure bool
	// Thresholds are the thresholds met or within their grace period,
	// rendered without observed values (stable while the pressure lasts).
	Thresholds []string
}

func (p NodePressure) equal(q NodePressure) bool {
	return p.MemoryPressure == q.MemoryPressure && slices.Equal(p.Thresholds, q.Thresholds)
}

// condition is the node condition that shows p, without its times.
func (p NodePressure) condition() corev1.NodeCondition {
	if !p.MemoryPressure {
		return corev1.NodeCondition{Type: NodeConditionType, Status: corev1.ConditionFalse, Reason: "NoMemoryPressure",
			Message: "cri-guard sees no memory pressure"}
	}
	msg := "cri-guard sees memory pressure"
	if len(p.Thresholds) > 0 {
		msg += ": " + strings.Join(p.Thresholds, "; ")
	}
	return corev1.NodeCondition{Type: NodeConditionType, Status: corev1.ConditionTrue, Reason: "MemoryPressure", Message: msg}
}

// nodeState is what the client knows and wants of its Node (Client.mu).
type nodeState struct {
	want  *NodePressure // the latest view; nil before the first evaluation
	dirty bool          // want is not written yet
	// status is the condition's status in the API (read at the first
	// write, then as written): its transition time moves only when it
	// changes
	status corev1.ConditionStatus
	read   bool
	beat   time.Time // when the next heartbeat is due
	tries  int
	next   time.Time
}

// SetNodePressure is told of every change of the eviction manager's view
// of memory pressure (on the sync loop's goroutine: it only records it and
// wakes the writer). The node condition follows it.
func (c *Client) SetNodePressure(p NodePressure) {
	p.Thresholds = slices.Clone(p.Thresholds)
	c.mu.Lock()
	if c.ns.want != nil && c.ns.want.equal(p) {
		c.mu.Unlock()
		return
	}
	c.ns.want, c.ns.dirty = &p, true
	c.mu.Unlock()
	c.poke()
}

// writeNode writes the node condition when it changed or its heartbeat is
// due, and returns how long until it is due again (writer goroutine).
func (c *Client) writeNode(ctx context.Context) time.Duration {
	c.mu.Lock()
	now := c.now()
	if c.ns.want == nil {
		c.mu.Unlock()
		return time.Hour
	}
	due := c.ns.beat
	if c.ns.dirty {
		due = now
	}
	due = maxTime(due, c.ns.next)
	if due.After(now) {
		c.mu.Unlock()
		return due.Sub(now)
	}
	want, read, status := *c.ns.want, c.ns.read, c.ns.status
	c.mu.Unlock()

	if !read {
		// the status the API has, from the Node's cache (the first write
		// waits for it: Run pokes the writer once it is synced)
		if !c.nodes.HasSynced() {
			return time.Hour
		}
		if n := c.cachedNode(); n != nil {
			for _, cd := range n.Status.Conditions {
				if cd.Type == NodeConditionType {
					status = cd.Status
				}
			}
		}
	}
	err := c.writeCondition(ctx, want, status)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.note(opCondition, err)
	if err != nil {
		c.ns.tries++
		d := c.backoff(c.ns.tries)
		c.ns.next = c.now().Add(d)
		if c.ns.tries == 1 || c.ns.tries%10 == 0 {
			c.log.WithError(err).WithFields(logrus.Fields{"op": opCondition, "tries": c.ns.tries}).Warn("cannot write the node condition: retrying")
		}
		return d
	}
	c.ns.tries, c.ns.next = 0, time.Time{}
	c.ns.read, c.ns.status = true, want.condition().Status
	beat := c.jitter(c.heartbeat, heartbeatJitter)
	c.ns.beat = c.now().Add(beat)
	c.ns.dirty = !c.ns.want.equal(want)
	if c.ns.dirty {
		return 0
	}
	return beat
}

// writeCondition patches the node's status with cri-guard's condition, a
// strategic merge on the conditions' type (the kubelet's are untouched):
// the heartbeat is now, the transition time too when the status differs
// from was, else the one the API has is kept.
func (c *Client) writeCondition(ctx context.Context, p NodePressure, was corev1.ConditionStatus) error {
	now := metav1.NewTime(c.now())
	cond := p.condition()
	m := map[string]any{"type": cond.Type, "status": cond.Status, "reason": cond.Reason, "message": cond.Message,
		"lastHeartbeatTime": now}
	if cond.Status != was {
		m["lastTransitionTime"] = now
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{m}}})
	if err != nil {
		return err
	}
	if _, err := c.srv.patchNodeStatus(ctx, c.node, types.StrategicMergePatchType, patch); err != nil {
		return fmt.Errorf("patch node %q status: %w", c.node, err)
	}
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
