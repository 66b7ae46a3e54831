package maxprocs

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/fakenode"
)

// fakeAPI is the in-process API server of maxprocs without --kubeconfig:
// a real HTTPS server (HTTP/2) on loopback that serves what cri-guard's kube client asks,
// with real JSON: list and watch of the pods bound to a node (with the
// watch-list stream client-go prefers, and resourceVersion resumption),
// get and strategic-merge patch of the node and its status, strategic-merge
// patch of a pod's status (the change is watched, as cri-guard's reports
// expect), creation of events. It stands in for kube-apiserver when the
// cluster is not available; the objects carry managed fields as the API
// server's do (their decoding is part of the informer's cost).
type fakeAPI struct {
	srv  *httptest.Server
	addr string
	node string

	mu       sync.Mutex
	rv       int64
	pods     map[string]*corev1.Pod // by namespace/name
	byIndex  []string               // pod keys in creation order
	history  []apiEvent             // the last events, for watches that resume
	watchers map[chan apiEvent]bool // open watches
	seq      int                    // update counter
	nodeObj  *corev1.Node
	closed   bool

	http1 atomic.Int64 // requests not over HTTP/2
}

// apiEvent is one watch event, serialised once.
type apiEvent struct {
	rv   int64
	line []byte // {"type":...,"object":...}\n
}

const fakeHistory = 20000

// startFakeAPI serves pods bound to node on 127.0.0.1, over TLS with
// HTTP/2 as kube-apiserver does (client-go then multiplexes the watch and
// the writes on one connection, and the child pays for TLS and HTTP/2
// framing as it would).
func startFakeAPI(node string) (*fakeAPI, error) {
	a := &fakeAPI{node: node, pods: map[string]*corev1.Pod{}, watchers: map[chan apiEvent]bool{}}
	n := &corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: node, UID: "11111111-2222-3333-4444-555555555555", ResourceVersion: "1",
			CreationTimestamp: metav1.Now()}}
	a.nodeObj = n
	a.rv = 1
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.srv.EnableHTTP2 = true
	a.srv.StartTLS()
	a.addr = a.srv.URL
	return a, nil
}

// kubeconfig writes a kubeconfig for the fake API into dir.
func (a *fakeAPI) kubeconfig(dir string) (string, error) {
	p := filepath.Join(dir, "fake-api.kubeconfig")
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw}))
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: bench
  user: {}
contexts:
- name: fake
  context: {cluster: fake, user: bench}
current-context: fake
`, a.addr, ca)
	return p, os.WriteFile(p, []byte(kc), 0o600)
}

func (a *fakeAPI) close() {
	a.mu.Lock()
	a.closed = true
	for w := range a.watchers {
		close(w)
		delete(a.watchers, w)
	}
	a.mu.Unlock()
	a.srv.Close()
}

// addPods stores the pods as the API server would create them and return
// them: uid, resourceVersion, creationTimestamp, managed fields, status.
func (a *fakeAPI) addPods(pods []*corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for i, p := range pods {
		a.rv++
		p.UID = types.UID(fmt.Sprintf("9f0c%04x-5b1e-4c3a-8d2f-%012x", i, a.rv))
		p.ResourceVersion = strconv.FormatInt(a.rv, 10)
		p.CreationTimestamp = metav1.NewTime(now.Truncate(time.Second))
		p.Status = fakenode.RunningStatus(p, i, now)
		p.ManagedFields = managedFieldsOf(p, now)
		k := p.Namespace + "/" + p.Name
		a.pods[k] = p
		a.byIndex = append(a.byIndex, k)
	}
}

// update changes the update annotation of the i-th pod (a watched
// MODIFIED event).
func (a *fakeAPI) update(i int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.byIndex) == 0 {
		return nil
	}
	p := a.pods[a.byIndex[i%len(a.byIndex)]].DeepCopy()
	a.seq++
	p.Annotations[fakenode.UpdateAnnotation] = strconv.Itoa(a.seq)
	a.store(p, "MODIFIED")
	return nil
}

// store bumps the resourceVersion, keeps p and sends the event (mu held).
func (a *fakeAPI) store(p *corev1.Pod, typ string) {
	a.rv++
	p.ResourceVersion = strconv.FormatInt(a.rv, 10)
	a.pods[p.Namespace+"/"+p.Name] = p
	ev := apiEvent{rv: a.rv, line: eventLine(typ, p)}
	a.history = append(a.history, ev)
	if len(a.history) > fakeHistory {
		a.history = a.history[len(a.history)-fakeHistory/2:]
	}
	for w := range a.watchers {
		select {
		case w <- ev:
		default: // a watcher that cannot keep up is ended: it relists
			close(w)
			delete(a.watchers, w)
		}
	}
}

// meanEventBytes is the mean size of a pod's watch event.
func (a *fakeAPI) meanEventBytes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, p := range a.pods {
		n += len(eventLine("MODIFIED", p))
	}
	if len(a.pods) == 0 {
		return 0
	}
	return n / len(a.pods)
}

func eventLine(typ string, obj any) []byte {
	b, err := json.Marshal(map[string]any{"type": typ, "object": obj})
	if err != nil {
		panic(err) // API types always marshal
	}
	return append(b, '\n')
}

func (a *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 2 {
		a.http1.Add(1)
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods":
		if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
			a.watch(w, r)
		} else {
			a.list(w, r)
		}
	case len(parts) >= 4 && parts[0] == "api" && parts[2] == "nodes" && parts[3] == a.node:
		a.serveNode(w, r, parts[4:])
	case len(parts) == 7 && parts[2] == "namespaces" && parts[4] == "pods" && parts[6] == "status" && r.Method == http.MethodPatch:
		a.patchPodStatus(w, r, parts[3], parts[5])
	case len(parts) == 5 && parts[2] == "namespaces" && parts[4] == "events" && r.Method == http.MethodPost:
		b, _ := io.ReadAll(r.Body)
		writeJSON(w, http.StatusCreated, json.RawMessage(b))
	default:
		apiError(w, http.StatusNotFound, metav1.StatusReasonNotFound, "not served by the fake API: "+r.Method+" "+r.URL.Path)
	}
}

// selected reports whether the request's field selector takes p.
func (a *fakeAPI) selected(r *http.Request, p *corev1.Pod) bool {
	fs := r.URL.Query().Get("fieldSelector")
	if fs == "" {
		return true
	}
	v, ok := strings.CutPrefix(fs, "spec.nodeName=")
	return ok && p.Spec.NodeName == v
}

func (a *fakeAPI) list(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	l := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	l.ResourceVersion = strconv.FormatInt(a.rv, 10)
	for _, k := range a.byIndex {
		if p := a.pods[k]; a.selected(r, p) {
			l.Items = append(l.Items, *p)
		}
	}
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, l)
}

// watch streams events: with sendInitialEvents the current pods first and
// the bookmark that ends them (client-go's watch list), else the events
// after resourceVersion.
func (a *fakeAPI) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fl, ok := w.(http.Flusher)
	if !ok {
		apiError(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "no flusher")
		return
	}
	from, _ := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	ch := make(chan apiEvent, 4096)
	var initial [][]byte
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	if q.Get("sendInitialEvents") == "true" {
		for _, k := range a.byIndex {
			if p := a.pods[k]; a.selected(r, p) {
				initial = append(initial, eventLine("ADDED", p))
			}
		}
		bm := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: strconv.FormatInt(a.rv, 10), Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		initial = append(initial, eventLine("BOOKMARK", bm))
	} else if from > 0 {
		if len(a.history) > 0 && a.history[0].rv > from+1 && from < a.rv {
			a.mu.Unlock()
			st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(eventLine("ERROR", st))
			return
		}
		for _, ev := range a.history {
			if ev.rv > from {
				initial = append(initial, ev.line)
			}
		}
	}
	a.watchers[ch] = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		if a.watchers[ch] {
			delete(a.watchers, ch)
		}
		a.mu.Unlock()
	}()
	timeout := 5 * time.Minute
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	end := time.NewTimer(timeout)
	defer end.Stop()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	for _, l := range initial {
		if _, err := w.Write(l); err != nil {
			return
		}
	}
	fl.Flush()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if _, err := w.Write(ev.line); err != nil {
				return
			}
			fl.Flush()
		case <-end.C:
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (a *fakeAPI) serveNode(w http.ResponseWriter, r *http.Request, sub []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && len(sub) == 0:
		writeJSON(w, http.StatusOK, a.nodeObj)
	case r.Method == http.MethodPatch && (len(sub) == 0 || sub[0] == "status"):
		patch, _ := io.ReadAll(r.Body)
		orig, _ := json.Marshal(a.nodeObj)
		out, err := strategicpatch.StrategicMergePatch(orig, patch, corev1.Node{})
		if err != nil {
			apiError(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
			return
		}
		var n corev1.Node
		if err := json.Unmarshal(out, &n); err != nil {
			apiError(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
			return
		}
		a.rv++
		n.ResourceVersion = strconv.FormatInt(a.rv, 10)
		a.nodeObj = &n
		writeJSON(w, http.StatusOK, &n)
	default:
		apiError(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, r.Method)
	}
}

// patchPodStatus applies a strategic merge patch to a pod's status (the
// UID in the patch is a precondition) and sends the change to the watches.
func (a *fakeAPI) patchPodStatus(w http.ResponseWriter, r *http.Request, ns, name string) {
	patch, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pods[ns+"/"+name]
	if !ok {
		apiError(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("pods %q not found", name))
		return
	}
	var pre struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if json.Unmarshal(patch, &pre) == nil && pre.Metadata.UID != "" && pre.Metadata.UID != string(p.UID) {
		apiError(w, http.StatusConflict, metav1.StatusReasonConflict, "Precondition failed: UID in precondition")
		return
	}
	orig, _ := json.Marshal(p)
	out, err := strategicpatch.StrategicMergePatch(orig, patch, corev1.Pod{})
	if err != nil {
		apiError(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
		return
	}
	var np corev1.Pod
	if err := json.Unmarshal(out, &np); err != nil {
		apiError(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
		return
	}
	np.Spec, np.ObjectMeta = p.Spec, *p.ObjectMeta.DeepCopy() // only the status changes
	a.store(&np, "MODIFIED")
	writeJSON(w, http.StatusOK, &np)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func apiError(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg})
}

// managedFieldsOf makes the managed fields an API server keeps for p: the
// creator's (metadata and spec) and the kubelet's (status), each a field
// set with an entry for every field set, as server-side apply tracks them.
func managedFieldsOf(p *corev1.Pod, at time.Time) []metav1.ManagedFieldsEntry {
	t := metav1.NewTime(at.Truncate(time.Second))
	entry := func(manager, sub string, v any) metav1.ManagedFieldsEntry {
		b, _ := json.Marshal(v)
		var m any
		_ = json.Unmarshal(b, &m)
		fs, _ := json.Marshal(fieldSet(m))
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			Time: &t, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: fs}, Subresource: sub}
	}
	meta := map[string]any{"metadata": map[string]any{"labels": p.Labels, "annotations": p.Annotations}, "spec": p.Spec}
	return []metav1.ManagedFieldsEntry{entry("kubectl-client-side-apply", "", meta), entry("kubelet", "status", map[string]any{"status": p.Status})}
}

// fieldSet is the FieldsV1 shape of a JSON value: "f:<key>" for each field,
// "k:<n>" for each list item, "." for a leaf.
func fieldSet(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{".": map[string]any{}}
		for k, e := range t {
			out["f:"+k] = fieldSet(e)
		}
		return out
	case []any:
		out := map[string]any{".": map[string]any{}}
		for i, e := range t {
			out[fmt.Sprintf(`k:{"i":%d}`, i)] = fieldSet(e)
		}
		return out
	default:
		return map[string]any{}
	}
}
