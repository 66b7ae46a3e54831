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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// reportKind says which decision a report is of.
type reportKind int

const (
	kindReject reportKind = iota
	kindEvict
)

// op is the kind's label in Observer.APIWrite.
func (k reportKind) op() string {
	if k == kindReject {
		return opReject
	}
	return opEvict
}

// The op labels of Observer.APIWrite.
const (
	opReject    = "reject"
	opEvict     = "evict"
	opEvent     = "event"
	opCondition = "node-condition"
)

// eventComponent is the reporting component of cri-guard's events: they
// are cri-guard's, not the kubelet's, with the kubelet's reasons.
const eventComponent = "cri-guard"

// Why a report's re-assertions are bounded: what the kubelet's status
// manager does to the fields cri-guard owns once the pod is Failed in the
// API (1.36 and 1.37 alike: pkg/kubelet/status/status_manager.go,
// generateAPIPodStatus in pkg/kubelet/kubelet_pods.go).
//   - Phase: kept. generateAPIPodStatus forces the API's terminal phase back
//     (no transition out of a terminal phase) and TerminatePod only ever
//     moves to Failed. Only a status cached before the kubelet saw the
//     report (a rejection's Pending) can be written over it, until the
//     kubelet's next sync of the pod reads the API's Failed.
//   - DisruptionTarget: kept. It is not among the conditions the kubelet
//     owns (PodConditionByKubelet): mergePodStatus and generateAPIPodStatus
//     carry the API's over, and the kubelet's own replaces it only on a
//     transition to a terminal phase, which a pod Failed already never
//     makes.
//   - Reason and message: the kubelet's. generateAPIPodStatus takes them
//     from its status cache when the phase it derives is the cached one
//     (the API's only where the cache's are empty), and none when the
//     cached phase changes (Running to the API's Failed). Once the pod's
//     worker is done nothing refreshes that cache, and each syncBatch (10 s)
//     finds the API unlike it (needsReconcile) and patches the cache's
//     reason and message back, for as long as the pod exists: no write of
//     cri-guard's changes that cache, so answering each replacement is a
//     war without end (6 writes a minute per pod). What does stick is the
//     API's value at the kubelet's syncs of the pod (generateAPIPodStatus
//     falls back to it): those right after the report, and the first after
//     a kubelet restart (an empty cache starts from the API's status).
//
// So a replacement is written again at most reassertMax times within
// reassertWindow of the report; past that the kubelet's values are left as
// they are, said once in the log. The pod stays Failed, with its
// DisruptionTarget and cri-guard's event.
//
// A kubelet that starts (KubeletStarted) arms the bound again, from then:
// its status manager starts from an empty cache and its first syncs of the
// pod take reason and message from the API, so a write that lands before
// them, or right after one of them has regressed the pod while the pod's
// worker is still syncing it, is what its cache keeps from then on. One
// kubelet start costs at most reassertMax writes per reported pod. The
// race between that first sync and the write at the start is the new
// kubelet's to win when the old one had replaced the report at its status
// syncs: a kubelet that exits (KubeletStopped) has the report written
// again while none runs, and the next one's first sync reads it (unless
// the pod's container exited 0: see KubeletStopped).
const (
	reassertMax    = 3
	reassertWindow = 10 * time.Minute
)

// defaultGoneAfter is how long a report waits for its pod to be in the
// cache (the pod of a sandbox is in the API before the kubelet asks for
// it, but the watch may lag) before the pod is taken for gone.
const defaultGoneAfter = time.Minute

// report is one decision reported on one pod: the fields of the pod's
// status cri-guard owns (phase, reason, message, DisruptionTarget), written
// again when the watch shows them replaced (at most reassertMax times
// within reassertWindow), and its event, made once, after the status. Its
// fields are guarded by Client.mu, but eventMade, which only the writer
// goroutine reads and writes.
type report struct {
	kind      reportKind
	uid       string
	namespace string
	name      string
	reason    string
	message   string // the decision's (the event's); the status's is statusMessage
	since     time.Time

	pending  bool      // waiting for the writer
	uncached bool      // waiting for its pod to reach the cache
	next     time.Time // when it is due
	tries    int       // failed writes in a row
	// patched: cri-guard's status was written; patchedRV is the
	// resourceVersion the last write returned (the watch may still deliver
	// older versions, which say nothing of it)
	patched    bool
	patchedRV  uint64
	reportedAt time.Time // when the first write returned
	armedAt    time.Time // when the bound's window started: the report, or the kubelet's last start
	reasserts  int       // writes after another writer's since armedAt
	// settled: nothing more to write (the pod was terminal before it, is
	// gone, or the kubelet's values are left as they are: leftAlone, the
	// one a kubelet's start undoes)
	settled   bool
	leftAlone bool
	eventMade bool
}

// statusMessage is the pod status's message: the kubelet's rejectPod
// prefixes its own.
func (r *report) statusMessage() string {
	if r.kind == kindReject {
		return "Pod was rejected: " + r.message
	}
	return r.message
}

func (r *report) fields() logrus.Fields {
	return logrus.Fields{"pod": r.name, "namespace": r.namespace, "pod_uid": r.uid, "op": r.kind.op()}
}

// Rejected reports that admission refused p as the kubelet's rejectPod
// does: a Warning event with reason and message, and the pod's status
// phase Failed, reason, message "Pod was rejected: <message>", so that the
// kubelet stops retrying it and its controller replaces it. It never
// blocks; a pod is reported once.
func (c *Client) Rejected(p *pod.Pod, reason, message string) {
	c.add(&report{kind: kindReject, uid: p.UID, namespace: p.Namespace, name: p.Name, reason: reason, message: message})
}

// Evicted reports that cri-guard stopped p's sandbox, as the kubelet's
// evictPod does: a Warning event Evicted with the message, and the pod's
// status phase Failed, reason Evicted, the message and the DisruptionTarget
// condition. It never blocks; a pod is reported once.
func (c *Client) Evicted(p *pod.Pod, message string) {
	c.add(&report{kind: kindEvict, uid: p.UID, namespace: p.Namespace, name: p.Name, reason: "Evicted", message: message})
}

// add queues a new report. This is where a pod is reported once: a second
// decision on a pod already reported (the kubelet's retry of a rejected
// pod) adds nothing; keeping the first report true is the watch's work
// (watched).
func (c *Client) add(r *report) {
	owner := ""
	if r.kind == kindReject {
		c.viewMu.RLock()
		owner = c.views[r.uid].owner
		c.viewMu.RUnlock()
	}
	c.mu.Lock()
	if _, ok := c.reports[r.uid]; ok {
		c.mu.Unlock()
		return
	}
	if owner != "" && !c.rejections.allow(owner, c.now()) {
		c.unreported++
		first := c.rejections.firstRefusal(owner)
		c.mu.Unlock()
		if first {
			c.log.WithFields(r.fields()).WithField("owner_uid", owner).WithField("bound", fmt.Sprintf("%d per %s", rejectBurst, rejectWindow)).
				Info("rejection not reported: its owner's rejections are over the bound; the pod waits for the kubelet's retries")
		}
		return
	}
	r.since, r.next, r.pending = c.now(), c.now(), true
	c.reports[r.uid] = r
	c.mu.Unlock()
	c.poke()
}

// forget drops the reports of a deleted pod.
func (c *Client) forget(uid string) {
	c.mu.Lock()
	delete(c.reports, uid)
	c.mu.Unlock()
}

// watched is told of every pod the informer adds or updates: a report
// whose status is written and no longer holds (the kubelet's status
// manager wrote its own over it) is written again, within the bound
// (reassertMax in reassertWindow); past it the pod's status is left to
// the kubelet. A report waiting for its pod to reach the cache is woken.
func (c *Client) watched(p *corev1.Pod) {
	c.mu.Lock()
	r, ok := c.reports[string(p.UID)]
	if !ok || r.settled {
		c.mu.Unlock()
		return
	}
	if r.pending {
		if r.uncached { // its pod has come: due now
			r.uncached, r.next = false, c.now()
		}
		c.mu.Unlock()
		c.poke()
		return
	}
	if !replaced(p, r) {
		c.mu.Unlock()
		return
	}
	f := r.fields()
	f["phase"], f["reason"], f["message"] = p.Status.Phase, p.Status.Reason, p.Status.Message
	f["reasserts"], f["after"] = r.reasserts, c.now().Sub(r.reportedAt).Round(time.Second)
	if r.reasserts >= reassertMax || c.now().Sub(r.armedAt) >= reassertWindow {
		r.settled, r.leftAlone = true, true
		c.mu.Unlock()
		f["bound"] = fmt.Sprintf("%d in %s", reassertMax, reassertWindow)
		c.log.WithFields(f).Info("reported pod status replaced again: the kubelet's values are left as they are")
		return
	}
	r.reasserts++
	r.pending, r.next = true, c.now()
	c.mu.Unlock()
	c.log.WithFields(f).Info("reported pod status replaced by another writer: writing it again")
	c.poke()
}

// KubeletStarted tells the client that a kubelet process has started on
// the node (cmd sees a new kubelet process connect to the CRI socket, which
// it does before it syncs any pod). Every written report gets its bound
// again (reassertMax writes within reassertWindow from now), those left to
// the kubelet included; one whose cached pod lacks its fields is written
// again at once, so that the new kubelet's first sync of the pod reads
// cri-guard's values from the API. It never blocks.
func (c *Client) KubeletStarted() {
	c.rearm("kubelet started: reported pod statuses are kept again within the bound")
}

// KubeletStopped tells the client that the kubelet process has exited
// (cmd sees its last CRI connection close and the process gone). Until a
// new one starts nothing regresses a report, and the new one's status
// manager starts from the API's status: a report the old kubelet had
// replaced (it does at each status sync once its cache lacks the report,
// and the bound may have left it so) is written now, while no kubelet
// can write over it, so that the next kubelet's first sync reads it
// whatever the race between that sync and KubeletStarted's write. That
// sync keeps it when the phase it derives is the API's Failed; a pod
// whose container exited 0 derives Succeeded, which the kubelet forces
// back to Failed without any reason, at every sync, whatever the API
// holds: there no write sticks, and the bound ends the exchange. Every
// written report gets its bound again, as at a start: a kubelet restart
// costs at most 1 + reassertMax writes per reported pod. It never blocks.
func (c *Client) KubeletStopped() {
	c.rearm("kubelet stopped: reported pod statuses the kubelet replaced are written again before the next one starts")
}

// rearm gives every written report its bound again (those left to the
// kubelet included) and writes at once each one whose cached pod lacks
// its fields.
func (c *Client) rearm(msg string) {
	c.mu.Lock()
	armed, due := 0, 0
	for _, r := range c.reports {
		if !r.patched || (r.settled && !r.leftAlone) {
			continue // not written yet, or nothing to keep (gone, terminal before)
		}
		r.settled, r.leftAlone = false, false
		r.reasserts, r.armedAt = 0, c.now()
		armed++
		if r.pending {
			continue
		}
		if p, ok := byUID(c.pods, r.uid); ok && replaced(p, r) {
			r.reasserts++
			r.pending, r.next = true, c.now()
			due++
		}
	}
	c.mu.Unlock()
	if armed == 0 {
		return
	}
	c.log.WithFields(logrus.Fields{"reports": armed, "written_again": due, "bound": fmt.Sprintf("%d in %s", reassertMax, reassertWindow)}).
		Info(msg)
	if due > 0 {
		c.poke()
	}
}

// replaced says whether the cached pod shows the written report replaced:
// it lacks what cri-guard owns, and it is not older than cri-guard's last
// write (the watch may still deliver older versions, which say nothing of
// it).
func replaced(p *corev1.Pod, r *report) bool {
	return !holds(p, r) && (r.patchedRV == 0 || resourceVersion(p) >= r.patchedRV)
}

// resourceVersion is the pod's resourceVersion as a number (etcd's
// revision); 0 when it is not one.
func resourceVersion(p *corev1.Pod) uint64 {
	v, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
	return v
}

// holds says whether the pod's status has what cri-guard owns of it.
func holds(p *corev1.Pod, r *report) bool {
	st := &p.Status
	if st.Phase != corev1.PodFailed || st.Reason != r.reason || st.Message != r.statusMessage() {
		return false
	}
	return r.kind == kindReject || disruptionTargetHolds(st, r)
}

// disruptionTargetHolds says whether st has the eviction's DisruptionTarget.
func disruptionTargetHolds(st *corev1.PodStatus, r *report) bool {
	dt := disruptionTarget(st)
	return dt != nil && dt.Status == corev1.ConditionTrue && dt.Reason == corev1.PodReasonTerminationByKubelet && dt.Message == r.message
}

func disruptionTarget(st *corev1.PodStatus) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == corev1.DisruptionTarget {
			return &st.Conditions[i]
		}
	}
	return nil
}

// writeReport makes one due report from the cached pod: the status
// first, then, once it is written, the event (queued to the broadcaster:
// a refused or failing event write never holds the status back), and
// records the outcome (writer goroutine).
func (c *Client) writeReport(ctx context.Context, r *report) {
	p, ok := byUID(c.pods, r.uid)
	if !ok {
		c.mu.Lock()
		if c.pods.HasSynced() && c.now().Sub(r.since) >= c.goneAfter {
			r.pending, r.settled = false, true
			c.note(r.kind.op(), errGone)
			c.mu.Unlock()
			c.log.WithFields(r.fields()).Info("pod not in the API: not reported")
			return
		}
		// the watch brings it (watched makes the report due), else gone
		r.uncached, r.next = true, r.since.Add(c.goneAfter)
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	patched := r.patched
	c.mu.Unlock()
	if !patched && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) && !holds(p, r) {
		// terminal already, not by cri-guard: nothing to say
		c.mu.Lock()
		r.pending, r.settled = false, true
		c.mu.Unlock()
		c.log.WithFields(r.fields()).WithField("phase", p.Status.Phase).Info("pod terminal before its report: not reported")
		return
	}
	out, err := c.patchStatus(ctx, p, r, patched)
	if err == nil && !r.eventMade {
		r.eventMade = c.event(out, r)
	}
	c.wrote(r, out, err)
	if q, ok := byUID(c.pods, r.uid); ok && err == nil && resourceVersion(q) > resourceVersion(out) {
		// a version newer than the write, which the watch brought while
		// it was in flight (watched leaves a pending report alone)
		c.watched(q)
	}
}

// wrote records the outcome of a report's write.
func (c *Client) wrote(r *report, out *corev1.Pod, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		if !r.patched {
			r.reportedAt, r.armedAt = c.now(), c.now()
			c.log.WithFields(r.fields()).WithField("after", c.now().Sub(r.since).Round(time.Millisecond)).
				Info("pod status reported to the API server")
		}
		r.pending, r.patched, r.tries = false, true, 0
		r.patchedRV = resourceVersion(out)
		c.note(r.kind.op(), nil)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// not found, or another pod of that name (the UID precondition)
		r.pending, r.settled = false, true
		c.note(r.kind.op(), errGone)
		c.log.WithFields(r.fields()).Info("pod gone before its report: not reported")
	default:
		r.tries++
		r.next = c.now().Add(c.backoff(r.tries))
		c.note(r.kind.op(), err)
		if r.tries == 1 || r.tries%10 == 0 {
			c.log.WithError(err).WithFields(r.fields()).WithField("tries", r.tries).Warn("cannot report to the API server: retrying")
		}
	}
}

// patchStatus writes the fields of the pod's status that cri-guard owns, a
// strategic merge patch on the status subresource with the pod's UID as a
// precondition (as the kubelet's status manager patches): the other fields
// and conditions stay as their writers left them. The first write has
// them all; a write again only those the cached pod p lacks. A
// DisruptionTarget that is True already keeps its transition time.
func (c *Client) patchStatus(ctx context.Context, p *corev1.Pod, r *report, again bool) (*corev1.Pod, error) {
	st := map[string]any{}
	if !again || p.Status.Phase != corev1.PodFailed {
		st["phase"] = corev1.PodFailed
	}
	if !again || p.Status.Reason != r.reason {
		st["reason"] = r.reason
	}
	if !again || p.Status.Message != r.statusMessage() {
		st["message"] = r.statusMessage()
	}
	if r.kind == kindEvict && (!again || !disruptionTargetHolds(&p.Status, r)) {
		cond := map[string]any{"type": corev1.DisruptionTarget, "status": corev1.ConditionTrue,
			"reason": corev1.PodReasonTerminationByKubelet, "message": r.message}
		if dt := disruptionTarget(&p.Status); dt == nil || dt.Status != corev1.ConditionTrue {
			cond["lastTransitionTime"] = metav1.NewTime(c.now())
		}
		if p.Generation != 0 {
			cond["observedGeneration"] = p.Generation
		}
		st["conditions"] = []any{cond}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID}, "status": st})
	if err != nil {
		return nil, err
	}
	out, err := c.srv.patchPodStatus(ctx, p.Namespace, p.Name, types.StrategicMergePatchType, patch)
	if err != nil {
		return nil, fmt.Errorf("patch pod status: %w", err)
	}
	return out, nil
}

// The bound on the rejections reported per owner: without the node taint
// the scheduler sends a controller's replacement of a rejected pod straight
// back (a ReplicaSet makes hundreds a minute). Beyond rejectBurst reports in
// rejectWindow, a refused pod of that owner is not reported Failed: it
// stays Pending on the node, its sandbox retried by the kubelet's own
// back-off (every 10 s or so, each refusal cheap), and it starts once the
// pressure ends; its controller, seeing it pending, makes no other.
const (
	rejectBurst  = 3
	rejectWindow = 10 * time.Minute
)

// rejectLimiter counts the rejections reported per owner (Client.mu).
type rejectLimiter struct {
	times   map[string][]time.Time // by owner UID, within the window
	refused map[string]bool        // owners over the bound (logged once per episode)
}

// allow says whether a rejection of owner's pod may be reported now, and
// counts it if so.
func (l *rejectLimiter) allow(owner string, now time.Time) bool {
	if l.times == nil {
		l.times, l.refused = map[string][]time.Time{}, map[string]bool{}
	}
	for o, ts := range l.times { // drop what left the window
		ts = slices.DeleteFunc(ts, func(t time.Time) bool { return now.Sub(t) >= rejectWindow })
		if len(ts) == 0 {
			delete(l.times, o)
			delete(l.refused, o)
			continue
		}
		l.times[o] = ts
	}
	if len(l.times[owner]) >= rejectBurst {
		return false
	}
	l.times[owner] = append(l.times[owner], now)
	return true
}

// firstRefusal says whether this is the first rejection of owner's left
// unreported in this window.
func (l *rejectLimiter) firstRefusal(owner string) bool {
	first := !l.refused[owner]
	l.refused[owner] = true
	return first
}
