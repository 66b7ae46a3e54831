package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/internal/testutil"
)

// fakeAPI is an in-process API server for the REST path the client takes
// in production (restServer, its rest.Config, client-go's reflectors):
// list and watch of pods and of the Node, with watch-list (initial events
// and their end bookmark), bookmarks, compaction (410 to a watch from an
// older resourceVersion), pod changes sent to the open pod watches, node
// and pod status patches and events (created, patched, updated); it
// answers protobuf to a client that asks for it, JSON otherwise.
type fakeAPI struct {
	t   *testing.T
	srv *httptest.Server

	mu    sync.Mutex
	rv    uint64 // the latest resourceVersion
	floor uint64 // watches from an older one are answered 410 Gone
	pods  []*corev1.Pod
	node  *corev1.Node
	reqs  []apiRequest
	open  []*apiWatch // every watch, in the order opened
	// hangPatches: a PATCH is answered only when the client gives up
	hangPatches bool
	// bookmarkAfter: a pod watch that lasted this long gets a bookmark at
	// the latest resourceVersion (the API server sends one a minute), then
	// is ended by the server (its timeoutSeconds, scaled down)
	bookmarkAfter time.Duration
	events        []*corev1.Event // in the order created
	// eventCode: when not 0, every event write is refused with it
	eventCode int
}

// apiRequest is one request as the server saw it.
type apiRequest struct {
	method, path      string
	query             url.Values
	accept, mediaType string
}

// apiWatch is one watch request.
type apiWatch struct {
	resource string
	query    url.Values
	// clientGone is closed when the client ended the watch before the
	// server did
	clientGone chan struct{}
	// ended is closed when the server ended it
	ended chan struct{}
	// stop makes the server end it, with no bookmark newer than the
	// version it began with
	stop chan struct{}
	// changes are the changes to send (changed)
	changes chan watch.Event
}

func (w *apiWatch) gone() bool {
	select {
	case <-w.clientGone:
		return true
	default:
		return false
	}
}

// initial says whether the watch asks for the initial events (watch-list:
// a relist by watch).
func (w *apiWatch) initial() bool { return w.query.Get("sendInitialEvents") == "true" }

func newFakeAPI(t *testing.T, pods ...*corev1.Pod) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, rv: 100, pods: pods,
		node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", ResourceVersion: "100"}}}
	for i, p := range pods {
		p.ResourceVersion = strconv.Itoa(50 + i)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// kubeconfig writes a kubeconfig for the server and returns its path.
func (f *fakeAPI) kubeconfig() string {
	f.t.Helper()
	p := filepath.Join(f.t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, f.srv.URL)
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// start runs a client made by New (the production path) against the
// server, its pod cache synced; prep, if any, adjusts it before it runs.
func (f *fakeAPI) start(cfg Config, prep ...func(*Client)) *Client {
	f.t.Helper()
	cfg.Kubeconfig, cfg.NodeName = f.kubeconfig(), "node-1"
	if cfg.relistWait == nil {
		// relists at once (production spreads them over relistSpread)
		cfg.relistWait = func(context.Context) error { return nil }
	}
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	c, err := New(cfg, logrus.NewEntry(l), nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range prep {
		p(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	f.t.Cleanup(func() { cancel(); <-done })
	testutil.WaitFor(f.t, "cache synced", func() bool { return c.State().Synced })
	return c
}

// requests are the requests seen so far that match.
func (f *fakeAPI) requests(match func(apiRequest) bool) []apiRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []apiRequest
	for _, r := range f.reqs {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// watches are the watches of resource opened so far.
func (f *fakeAPI) watches(resource string) []*apiWatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*apiWatch
	for _, w := range f.open {
		if w.resource == resource {
			out = append(out, w)
		}
	}
	return out
}

// relists counts the full reads of resource: LISTs and watch-lists.
func (f *fakeAPI) relists(resource string) int {
	n := len(f.requests(func(r apiRequest) bool {
		return r.method == http.MethodGet && r.path == "/api/v1/"+resource && !isWatch(r.query)
	}))
	for _, w := range f.watches(resource) {
		if w.initial() {
			n++
		}
	}
	return n
}

// compact moves the cluster on: other objects' writes took the latest
// resourceVersion to rv, and the watch cache no longer serves versions
// older than floor.
func (f *fakeAPI) compact(rv, floor uint64) {
	f.mu.Lock()
	f.rv, f.floor = rv, floor
	f.mu.Unlock()
}

func isWatch(q url.Values) bool { return q.Get("watch") == "true" || q.Get("watch") == "1" }

// info is the serializer for the request's Accept header (protobuf when
// asked for first, as the API server negotiates).
func info(r *http.Request) runtime.SerializerInfo {
	want := runtime.ContentTypeJSON
	if strings.HasPrefix(r.Header.Get("Accept"), runtime.ContentTypeProtobuf) {
		want = runtime.ContentTypeProtobuf
	}
	si, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), want)
	return si
}

func (f *fakeAPI) write(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object) {
	si := info(r)
	b, err := runtime.Encode(codecs.EncoderForVersion(si.Serializer, corev1.SchemeGroupVersion), obj)
	if err != nil {
		f.t.Errorf("encode %T: %v", obj, err)
		code, b = http.StatusInternalServerError, nil
	}
	w.Header().Set("Content-Type", si.MediaType)
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	mt := strings.TrimSpace(strings.Split(r.Header.Get("Content-Type"), ";")[0])
	f.mu.Lock()
	f.reqs = append(f.reqs, apiRequest{method: r.Method, path: r.URL.Path, query: r.URL.Query(), accept: r.Header.Get("Accept"), mediaType: mt})
	hang := f.hangPatches
	f.mu.Unlock()
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/"), "/")
	switch {
	case r.Method == http.MethodGet && len(parts) == 1 && (parts[0] == "pods" || parts[0] == "nodes"):
		if isWatch(r.URL.Query()) {
			f.watch(w, r, parts[0])
			return
		}
		f.mu.Lock()
		var list runtime.Object
		if parts[0] == "pods" {
			l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(f.rv, 10)}}
			for _, p := range f.pods {
				l.Items = append(l.Items, *p)
			}
			list = l
		} else {
			list = &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(f.rv, 10)}, Items: []corev1.Node{*f.node}}
		}
		f.mu.Unlock()
		f.write(w, r, http.StatusOK, list)
	case r.Method == http.MethodPatch && hang:
		// the body read, the server sees the client go away
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	case r.Method == http.MethodPatch && len(parts) == 3 && parts[0] == "nodes" && parts[2] == "status":
		f.patch(w, r, f.node, &corev1.Node{})
	case r.Method == http.MethodPatch && len(parts) == 5 && parts[2] == "pods" && parts[4] == "status":
		f.mu.Lock()
		var p *corev1.Pod
		for _, q := range f.pods {
			if q.Namespace == parts[1] && q.Name == parts[3] {
				p = q
			}
		}
		f.mu.Unlock()
		if p == nil {
			f.write(w, r, http.StatusNotFound, &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound})
			return
		}
		f.patch(w, r, p, &corev1.Pod{})
	case len(parts) >= 3 && parts[2] == "events":
		f.event(w, r, mt, parts)
	default:
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		w.WriteHeader(http.StatusNotFound)
	}
}

// event serves the event writes: POST, PATCH (strategic merge) and PUT
// of /api/v1/namespaces/<ns>/events[/<name>], refused with eventCode when
// it is set.
func (f *fakeAPI) event(w http.ResponseWriter, r *http.Request, mt string, parts []string) {
	f.mu.Lock()
	code := f.eventCode
	var cur *corev1.Event
	if len(parts) == 4 {
		for _, e := range f.events {
			if e.Namespace == parts[1] && e.Name == parts[3] {
				cur = e
			}
		}
	}
	f.mu.Unlock()
	if code != 0 {
		_, _ = io.Copy(io.Discard, r.Body)
		reason := metav1.StatusReasonInternalError
		if code == http.StatusForbidden {
			reason = metav1.StatusReasonForbidden
		}
		f.write(w, r, code, &metav1.Status{Status: metav1.StatusFailure, Code: int32(code), Reason: reason})
		return
	}
	decode := func() *corev1.Event {
		b, _ := io.ReadAll(r.Body)
		si, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mt)
		var ev corev1.Event
		if !ok {
			f.t.Errorf("event sent as %q", mt)
		} else if _, _, err := si.Serializer.Decode(b, nil, &ev); err != nil {
			f.t.Errorf("decode the event sent (%s): %v", mt, err)
		}
		return &ev
	}
	switch {
	case r.Method == http.MethodPost && len(parts) == 3:
		ev := decode()
		f.mu.Lock()
		f.rv++
		ev.ResourceVersion = strconv.FormatUint(f.rv, 10)
		f.events = append(f.events, ev)
		out := ev.DeepCopy()
		f.mu.Unlock()
		f.write(w, r, http.StatusCreated, out)
	case cur == nil:
		_, _ = io.Copy(io.Discard, r.Body)
		f.write(w, r, http.StatusNotFound, &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound})
	case r.Method == http.MethodPatch:
		f.patch(w, r, cur, &corev1.Event{})
	case r.Method == http.MethodPut:
		ev := decode()
		f.mu.Lock()
		f.rv++
		*cur = *ev
		cur.ResourceVersion = strconv.FormatUint(f.rv, 10)
		out := cur.DeepCopy()
		f.mu.Unlock()
		f.write(w, r, http.StatusOK, out)
	default:
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// patch applies a strategic merge patch to obj (a pointer into the
// server's state, guarded by f.mu) and answers the result.
func (f *fakeAPI) patch(w http.ResponseWriter, r *http.Request, obj, schema runtime.Object) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	cur, _ := json.Marshal(obj)
	out, err := strategicpatch.StrategicMergePatch(cur, b, schema)
	if err == nil {
		err = json.Unmarshal(out, obj)
	}
	f.rv++
	obj.(metav1.Object).SetResourceVersion(strconv.FormatUint(f.rv, 10))
	if p, ok := obj.(*corev1.Pod); ok {
		f.changed(p)
	}
	res := obj.DeepCopyObject()
	f.mu.Unlock()
	if err != nil {
		f.t.Errorf("patch %s: %v", r.URL.Path, err)
	}
	f.write(w, r, http.StatusOK, res)
}

// watch serves one watch until the server or the client ends it.
func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request, resource string) {
	aw := &apiWatch{resource: resource, query: r.URL.Query(), clientGone: make(chan struct{}), ended: make(chan struct{}),
		stop: make(chan struct{}), changes: make(chan watch.Event, 256)}
	f.mu.Lock()
	f.open = append(f.open, aw)
	rv, floor, after := f.rv, f.floor, f.bookmarkAfter
	var initial []runtime.Object
	if aw.initial() {
		if resource == "pods" {
			for _, p := range f.pods {
				initial = append(initial, p.DeepCopy())
			}
		} else {
			initial = append(initial, f.node.DeepCopy())
		}
	}
	f.mu.Unlock()
	defer func() {
		select {
		case <-aw.clientGone:
		default:
			close(aw.ended)
		}
	}()

	si := info(r)
	mt := si.MediaType
	if mt == runtime.ContentTypeProtobuf {
		mt += ";stream=watch" // as the API server says it
	}
	w.Header().Set("Content-Type", mt)
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	enc := restclientwatch.NewEncoder(
		streaming.NewEncoder(si.StreamSerializer.Framer.NewFrameWriter(w), si.StreamSerializer.Serializer),
		codecs.EncoderForVersion(si.Serializer, corev1.SchemeGroupVersion))
	send := func(ev watch.Event) {
		if err := enc.Encode(&ev); err != nil {
			f.t.Errorf("watch %s: encode: %v", resource, err)
		}
		flusher.Flush()
	}
	bookmark := func(rv uint64, end bool) watch.Event {
		m := metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}
		if end {
			m.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
		}
		if resource == "pods" {
			return watch.Event{Type: watch.Bookmark, Object: &corev1.Pod{ObjectMeta: m}}
		}
		return watch.Event{Type: watch.Bookmark, Object: &corev1.Node{ObjectMeta: m}}
	}

	from, _ := strconv.ParseUint(aw.query.Get("resourceVersion"), 10, 64)
	switch {
	case aw.initial():
		for _, o := range initial {
			send(watch.Event{Type: watch.Added, Object: o})
		}
		send(bookmark(rv, true))
	case from < floor:
		send(watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone,
			Reason: metav1.StatusReasonExpired, Message: fmt.Sprintf("too old resource version: %d (%d)", from, floor)}})
		return
	}
	var tick <-chan time.Time
	if after > 0 && resource == "pods" {
		tick = time.After(after)
	}
	for {
		select {
		case ev := <-aw.changes:
			send(ev)
			continue
		case <-tick:
			f.mu.Lock()
			rv := f.rv
			f.mu.Unlock()
			send(bookmark(rv, false))
		case <-r.Context().Done():
			close(aw.clientGone)
		case <-aw.stop:
			// a bookmark at the version the watch began with (not past the
			// compaction to come), so that it did not end empty
			send(bookmark(rv, false))
		}
		return
	}
}

// changed sends a pod's new version to the open pod watches (f.mu held).
func (f *fakeAPI) changed(p *corev1.Pod) {
	for _, w := range f.open {
		if w.resource != "pods" || w.gone() {
			continue
		}
		select {
		case <-w.ended:
			continue
		default:
		}
		select {
		case w.changes <- watch.Event{Type: watch.Modified, Object: p.DeepCopy()}:
		default:
			f.t.Errorf("pod watch: more than %d changes unsent", cap(w.changes))
		}
	}
}

// kubeletWrites plays the kubelet's status manager: it writes its own
// status over the pod's, a new version the pod watches are sent.
func (f *fakeAPI) kubeletWrites(name string, edit func(st *corev1.PodStatus)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pods {
		if p.Name == name {
			edit(&p.Status)
			f.rv++
			p.ResourceVersion = strconv.FormatUint(f.rv, 10)
			f.changed(p)
			return
		}
	}
	f.t.Fatalf("no pod %q", name)
}

// pod is a copy of the server's pod.
func (f *fakeAPI) pod(name string) *corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pods {
		if p.Name == name {
			return p.DeepCopy()
		}
	}
	f.t.Fatalf("no pod %q", name)
	return nil
}

// TestWatchOutlivesRequestTimeout: reads and writes have a deadline each,
// the watches none of the client's own: a watch asks the server for 5 to
// 10 minutes and for bookmarks, and is still open after a PATCH has run
// out of its request timeout.
func TestWatchOutlivesRequestTimeout(t *testing.T) {
	f := newFakeAPI(t, apiPod("web", "u1"))
	f.hangPatches = true
	c := f.start(Config{Timeout: 100 * time.Millisecond})
	for _, res := range []string{"pods", "nodes"} {
		testutil.WaitFor(t, res+" watched", func() bool { return len(f.watches(res)) > 0 })
		q := f.watches(res)[0].query
		s, err := strconv.Atoi(q.Get("timeoutSeconds"))
		if err != nil || s < 300 || s > 600 || q.Get("allowWatchBookmarks") != "true" {
			t.Fatalf("%s watch %v: want timeoutSeconds in [300, 600] and allowWatchBookmarks", res, q)
		}
	}
	sel := f.watches("nodes")[0].query.Get("fieldSelector")
	if sel != "metadata.name=node-1" {
		t.Fatalf("node watch field selector %q, want this node alone", sel)
	}
	c.SetNodePressure(NodePressure{MemoryPressure: true})
	testutil.WaitFor(t, "the hanging PATCH cut by its deadline", func() bool {
		return strings.Contains(c.State().LastError, "context deadline exceeded")
	})
	// the watches began before that PATCH: a client-wide timeout would
	// have cut them already (give its close time to reach the server)
	time.Sleep(200 * time.Millisecond)
	for _, res := range []string{"pods", "nodes"} {
		if w := f.watches(res)[0]; w.gone() {
			t.Fatalf("the %s watch was closed by the client", res)
		}
	}
}

// TestQuietWatchResumesFromBookmark: a quiet node's pod watch gets the
// server's bookmark and, when the server ends it, is opened again from the
// bookmark's resourceVersion, which the watch cache still has: no relist,
// though the version of the node's last pod change was compacted away.
func TestQuietWatchResumesFromBookmark(t *testing.T) {
	f := newFakeAPI(t, apiPod("web", "u1"))
	f.bookmarkAfter = 500 * time.Millisecond
	f.start(Config{Timeout: 50 * time.Millisecond})
	f.compact(1000, 900) // the rest of the cluster moved on
	testutil.WaitFor(t, "a pod watch from the bookmark", func() bool {
		for _, w := range f.watches("pods") {
			if !w.initial() && w.query.Get("resourceVersion") == "1000" {
				return true
			}
		}
		return false
	})
	if n := f.relists("pods"); n != 1 {
		t.Fatalf("%d relists of the pods, want only the first", n)
	}
	if w := f.watches("pods")[0]; w.gone() {
		t.Fatal("the first pod watch was closed by the client, not the server")
	}
}

// TestExpiredWatchRelistsOnce: a watch from a resourceVersion the server
// no longer has (410 Gone) is followed by one relist, then a watch again.
func TestExpiredWatchRelistsOnce(t *testing.T) {
	f := newFakeAPI(t, apiPod("web", "u1"))
	f.start(Config{})
	// the watch is ended by the server before any bookmark, and the
	// version it would resume from is compacted away meanwhile
	f.compact(2000, 1500)
	close(f.watches("pods")[0].stop)
	testutil.WaitFor(t, "relisted", func() bool { return f.relists("pods") == 2 })
	gone := 0
	for _, w := range f.watches("pods") {
		if !w.initial() && w.query.Get("resourceVersion") == "100" {
			gone++
		}
	}
	if gone != 1 {
		t.Fatalf("%d watches from the compacted version, want the one answered 410", gone)
	}
	// the relist's watch goes on; nothing more is read
	time.Sleep(300 * time.Millisecond)
	if n := f.relists("pods"); n != 2 {
		t.Fatalf("%d relists, want 2 (the first and one after the 410)", n)
	}
}

// TestRelistWaits: the first list of the pods and of the Node is not held
// back; a relist (after a 410) waits in the relist gate before it reaches
// the server, so that a fleet's nodes do not all relist in the second an
// API server comes back.
func TestRelistWaits(t *testing.T) {
	f := newFakeAPI(t, apiPod("web", "u1"))
	entered, release, wait := heldWait()
	f.start(Config{relistWait: wait})
	testutil.WaitFor(t, "listed", func() bool { return f.relists("pods") == 1 && f.relists("nodes") == 1 })
	if n := len(entered); n != 0 {
		t.Fatalf("the first lists waited %d times in the relist gate", n)
	}
	f.compact(2000, 1500)
	close(f.watches("pods")[0].stop)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the relist after a 410 did not wait in the gate")
	}
	if n := f.relists("pods"); n != 1 {
		t.Fatalf("%d pod lists reached the server while the relist waits, want the first alone", n)
	}
	close(release)
	testutil.WaitFor(t, "relisted", func() bool { return f.relists("pods") == 2 })
}

// heldWait is a gate's wait that tells of each entry (entered) and
// returns once release is closed, or with its context.
func heldWait() (entered chan struct{}, release chan struct{}, wait func(context.Context) error) {
	entered, release = make(chan struct{}, 8), make(chan struct{})
	return entered, release, func(ctx context.Context) error {
		entered <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestSpreadWaitEndsWithContext: the wait before a relist gives way to
// the reflector's stop.
func TestSpreadWaitEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := spreadWait(ctx); err == nil {
		t.Fatal("spreadWait on an ended context returned nil")
	}
}

// TestProtobuf: the client asks for protobuf (JSON accepted), reads pods
// answered in it, and sends its objects in it (patches are JSON by their
// nature).
func TestProtobuf(t *testing.T) {
	prio := int32(42)
	p := apiPod("web", "u1")
	p.Spec.Priority = &prio
	f := newFakeAPI(t, p)
	c := f.start(Config{})
	if a, ok := c.Pod("u1"); !ok || a.Priority == nil || *a.Priority != 42 {
		t.Fatalf("Pod(u1) = %+v, %v: want it read from the protobuf answers", a, ok)
	}
	c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, evictMsg)
	// the event is written after the status, by the broadcaster's own
	// goroutine
	testutil.WaitFor(t, "reported", func() bool {
		f.mu.Lock()
		events := len(f.events)
		f.mu.Unlock()
		return len(f.requests(func(r apiRequest) bool { return r.method == http.MethodPatch })) > 0 && c.State().Pending == 0 && events > 0
	})
	want := runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	for _, r := range f.requests(func(apiRequest) bool { return true }) {
		if r.accept != want {
			t.Errorf("%s %s: Accept %q, want %q", r.method, r.path, r.accept, want)
		}
		if r.method == http.MethodPost && r.mediaType != runtime.ContentTypeProtobuf {
			t.Errorf("%s %s: Content-Type %q, want protobuf", r.method, r.path, r.mediaType)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.events) != 1 || f.events[0].Reason != "Evicted" || f.events[0].InvolvedObject.UID != "u1" {
		t.Fatalf("events %+v: want the eviction's, decoded from protobuf", f.events)
	}
}

// TestNoPeriodicNodeGet: over many heartbeats the Node is never read: it
// comes from its watch.
func TestNoPeriodicNodeGet(t *testing.T) {
	f := newFakeAPI(t)
	now := time.Unix(5000, 0)
	var mu sync.Mutex
	c := f.start(Config{}, func(c *Client) {
		c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		c.rand = func() float64 { return 0.999 }
	})
	nodePatches := func() int {
		return len(f.requests(func(r apiRequest) bool {
			return r.method == http.MethodPatch && r.path == "/api/v1/nodes/node-1/status"
		}))
	}
	// a heartbeat is done when its outcome is recorded at the time of the
	// step (the next is due from then), not when the server has it
	recorded := func() bool {
		mu.Lock()
		at := now
		mu.Unlock()
		return c.State().LastOK.Equal(at)
	}
	c.SetNodePressure(NodePressure{})
	testutil.WaitFor(t, "the condition written", func() bool { return nodePatches() == 1 && c.State().Pending == 0 && recorded() })
	for i := range 5 {
		mu.Lock()
		now = now.Add(defaultHeartbeat * 6 / 5)
		mu.Unlock()
		c.poke()
		testutil.WaitFor(t, fmt.Sprintf("heartbeat %d", i+1), func() bool { return nodePatches() == i+2 && recorded() })
	}
	if gets := f.requests(func(r apiRequest) bool { return r.method == http.MethodGet && r.path == "/api/v1/nodes/node-1" }); len(gets) != 0 {
		t.Fatalf("%d GETs of the Node, want none", len(gets))
	}
	if n := f.relists("nodes"); n != 1 {
		t.Fatalf("%d reads of the Node list, want the first only", n)
	}
}

// podPatches counts the client's status patches of the pod name.
func (f *fakeAPI) podPatches(name string) int {
	return len(f.requests(func(r apiRequest) bool {
		return r.method == http.MethodPatch && r.path == "/api/v1/namespaces/default/pods/"+name+"/status"
	}))
}

// TestKubeletWriterBounded: a kubelet whose status cache lacks cri-guard's
// reason and message writes its own back at every status sync, for as
// long as the pod exists. cri-guard writes them again at most reassertMax
// times within reassertWindow of the report, then leaves the kubelet's (a
// line in the log, once): however many syncs come, the pod is written at
// most 1+reassertMax times in all.
func TestKubeletWriterBounded(t *testing.T) {
	tests := []struct {
		name  string
		every time.Duration // between the kubelet's writes
		want  int           // status patches in all
	}{
		{"every 5 s", 5 * time.Second, 1 + reassertMax},
		{"at once", 0, 1 + reassertMax},
		// the third comes past the window
		{"every 4 min", 4 * time.Minute, 1 + 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, apiPod("web", "u1"), apiPod("other", "u2"))
			now := time.Unix(5000, 0)
			var mu sync.Mutex
			var logs func() string
			c := f.start(Config{}, func(c *Client) {
				c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
				logs = logTo(c)
			})
			c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, evictMsg)
			testutil.WaitFor(t, "reported", func() bool { return f.podPatches("web") == 1 && c.State().Pending == 0 })
			for i := range 20 {
				mu.Lock()
				now = now.Add(tt.every)
				mu.Unlock()
				n := f.podPatches("web")
				f.kubeletWrites("web", func(st *corev1.PodStatus) { st.Reason, st.Message = "", "" })
				if n < tt.want {
					testutil.WaitFor(t, fmt.Sprintf("write %d answered", i+1), func() bool { return f.podPatches("web") == n+1 && c.State().Pending == 0 })
				}
			}
			testutil.WaitFor(t, "left to the kubelet", func() bool { return strings.Contains(logs(), leftToKubelet) })
			// the watch's changes are handled in order: once the other
			// pod's replacement is written again, every change of web's
			// was seen
			c.Evicted(&pod.Pod{UID: "u2", Name: "other", Namespace: "default"}, evictMsg)
			testutil.WaitFor(t, "the other pod reported", func() bool { return f.podPatches("other") == 1 && c.State().Pending == 0 })
			f.kubeletWrites("other", func(st *corev1.PodStatus) { st.Message = "" })
			testutil.WaitFor(t, "the other pod written again", func() bool { return f.podPatches("other") == 2 && c.State().Pending == 0 })
			if n := f.podPatches("web"); n != tt.want {
				t.Fatalf("%d status patches of the pod, want %d", n, tt.want)
			}
			if n := strings.Count(logs(), leftToKubelet); n != 1 {
				t.Fatalf("logged %d times, want once:\n%s", n, logs())
			}
			if st := f.pod("web").Status; st.Phase != corev1.PodFailed || st.Reason != "" || dtCondition(st) == nil {
				t.Fatalf("status %+v: want the kubelet's reason and message, Failed and DisruptionTarget kept", st)
			}
		})
	}
}

// TestStatusBeforeEvent: the pod's status is written first, its event
// after; an event the server refuses (403: an identity without events;
// 500) neither holds the status back nor is retried for ever.
func TestStatusBeforeEvent(t *testing.T) {
	for _, code := range []int{http.StatusForbidden, http.StatusInternalServerError} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			f := newFakeAPI(t, apiPod("web", "u1"))
			f.eventCode = code
			c := f.start(Config{})
			c.Evicted(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, evictMsg)
			isEvent := func(r apiRequest) bool {
				return strings.HasSuffix(r.path, "/events") || strings.Contains(r.path, "/events/")
			}
			testutil.WaitFor(t, "the status written and the event tried", func() bool {
				return f.pod("web").Status.Phase == corev1.PodFailed && len(f.requests(isEvent)) > 0 && c.State().Pending == 0
			})
			var order []string
			for _, r := range f.requests(func(r apiRequest) bool { return r.method != http.MethodGet }) {
				order = append(order, r.method+" "+r.path)
			}
			if len(order) < 2 || order[0] != "PATCH /api/v1/namespaces/default/pods/web/status" || !strings.HasSuffix(order[1], "/events") {
				t.Fatalf("writes %q: want the status PATCH, then the event", order)
			}
			if st := f.pod("web").Status; st.Reason != "Evicted" || st.Message != evictMsg {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// TestEventBurstCorrelated: the events go through client-go's correlator:
// 100 identical events of one pod at once make one event, its count
// raised by PATCHes up to the spam filter's burst (25 per pod), the rest
// dropped.
func TestEventBurstCorrelated(t *testing.T) {
	f := newFakeAPI(t, apiPod("web", "u1"), apiPod("other", "u2"))
	c := f.start(Config{})
	web, other := f.pod("web"), f.pod("other")
	r := &report{reason: "Evicted", message: evictMsg}
	for range 100 {
		if !c.event(web, r) {
			t.Fatal("no event recorder while the client runs")
		}
	}
	c.event(other, r) // written after the 100: they are all handled by then
	events := func(method string) int {
		return len(f.requests(func(r apiRequest) bool { return r.method == method && strings.Contains(r.path, "/events") }))
	}
	testutil.WaitFor(t, "the other pod's event", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range f.events {
			if e.InvolvedObject.Name == "other" {
				return true
			}
		}
		return false
	})
	if post, patch := events(http.MethodPost), events(http.MethodPatch); post != 2 || patch != 24 {
		t.Fatalf("%d POSTs and %d PATCHes of events, want 2 (web, other) and 24 (web's repeats up to the burst of 25)", post, patch)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := f.events[0]
	if ev.InvolvedObject.Name != "web" || ev.Count != 25 || ev.Source.Component != "cri-guard" || ev.Source.Host != "node-1" ||
		ev.ReportingController != "cri-guard" || ev.ReportingInstance != "node-1" || ev.Type != corev1.EventTypeWarning {
		t.Fatalf("event %+v: want web's, count 25, cri-guard's on node-1", ev)
	}
}

// TestNodeScopedRequests: every request the client makes is one the Node
// authorizer and NodeRestriction grant a node's own credentials, with no
// RBAC of cri-guard's: list and watch of the pods bound to it and of its
// own Node (by field selector), patches of those pods' status and of its
// own Node's status, and events. Nothing writes a Node's spec (its taints
// are the taint controller's), nor reads another node's objects.
func TestNodeScopedRequests(t *testing.T) {
	f := newFakeAPI(t, apiPod("web", "u1"), apiPod("db", "u2"))
	c := f.start(Config{})
	c.SetNodePressure(NodePressure{MemoryPressure: true, Thresholds: []string{"hard memory.available<1Gi"}})
	c.Rejected(&pod.Pod{UID: "u1", Name: "web", Namespace: "default"}, "Evicted", "The node had condition: [MemoryPressure]. ")
	c.Evicted(&pod.Pod{UID: "u2", Name: "db", Namespace: "default"}, evictMsg)
	testutil.WaitFor(t, "every write made", func() bool {
		f.mu.Lock()
		events := len(f.events)
		f.mu.Unlock()
		return events == 2 && c.State().Pending == 0
	})
	c.SetNodePressure(NodePressure{})
	testutil.WaitFor(t, "the calm written", func() bool { return c.State().Pending == 0 })
	allowed := func(r apiRequest) bool {
		switch {
		case r.method == http.MethodGet && r.path == "/api/v1/pods":
			return r.query.Get("fieldSelector") == "spec.nodeName=node-1"
		case r.method == http.MethodGet && r.path == "/api/v1/nodes":
			return r.query.Get("fieldSelector") == "metadata.name=node-1"
		case r.method == http.MethodPatch:
			return r.path == "/api/v1/nodes/node-1/status" ||
				r.path == "/api/v1/namespaces/default/pods/web/status" || r.path == "/api/v1/namespaces/default/pods/db/status"
		case r.method == http.MethodPost:
			return r.path == "/api/v1/namespaces/default/events"
		}
		return false
	}
	reqs := f.requests(func(apiRequest) bool { return true })
	for _, r := range reqs {
		if !allowed(r) {
			t.Errorf("%s %s?%s: not a request a node's own credentials are granted", r.method, r.path, r.query.Encode())
		}
	}
	if n := len(f.requests(func(r apiRequest) bool { return r.path == "/api/v1/nodes/node-1/status" })); n < 2 {
		t.Fatalf("%d node status patches in %d requests, want the pressure and the calm", n, len(reqs))
	}
}

// TestEarlyWatchEndWaits: a watch the server ended long before the
// timeout the reflector asked for (the server went away) is reopened
// after a wait in the gate, not at once, and resumes from its version (no
// relist); the first watches did not wait.
func TestEarlyWatchEndWaits(t *testing.T) {
	f := newFakeAPI(t, apiPod("web", "u1"))
	entered, release, wait := heldWait()
	f.start(Config{relistWait: wait})
	testutil.WaitFor(t, "watching", func() bool { return len(f.watches("pods")) == 1 && len(f.watches("nodes")) == 1 })
	if n := len(entered); n != 0 {
		t.Fatalf("the first lists and watches waited %d times in the gate", n)
	}
	close(f.watches("pods")[0].stop)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the watch the server ended early was reopened without a wait")
	}
	if n := len(f.watches("pods")); n != 1 {
		t.Fatalf("%d pod watches reached the server while the reopen waits, want the first alone", n)
	}
	close(release)
	testutil.WaitFor(t, "watch reopened", func() bool { return len(f.watches("pods")) == 2 })
	if n := f.relists("pods"); n != 1 {
		t.Fatalf("%d pod lists, want the first alone: the reopened watch resumes", n)
	}
	if n := len(entered); n != 0 {
		t.Fatalf("the Node's watch waited %d times: only the ended watch's reflector waits", n)
	}
}

// TestGate: which requests of a reflector wait.
func TestGate(t *testing.T) {
	waits := 0
	g := &gate{wait: func(context.Context) error { waits++; return nil }}
	ctx := context.Background()
	step := func(name string, do func() error, want int) {
		t.Helper()
		before := waits
		if err := do(); err != nil {
			t.Fatal(err)
		}
		if got := waits - before; got != want {
			t.Errorf("%s: waited %d times, want %d", name, got, want)
		}
	}
	step("first list", func() error { return g.beforeList(ctx) }, 0)
	g.listDone(fmt.Errorf("refused"))
	step("a first list again after it failed", func() error { return g.beforeList(ctx) }, 0)
	g.listDone(nil)
	step("the watch after the list", func() error { return g.beforeWatch(ctx) }, 0)
	g.watchOpened()
	g.watchEnded(9*time.Minute+30*time.Second, 10*time.Minute)
	step("a watch after one that lasted its timeout", func() error { return g.beforeWatch(ctx) }, 0)
	g.watchOpened()
	g.watchEnded(time.Minute, 10*time.Minute)
	step("a watch after one ended early", func() error { return g.beforeWatch(ctx) }, 1)
	step("its retry, the server still down", func() error { return g.beforeWatch(ctx) }, 1)
	g.watchOpened()
	step("a watch after one was answered", func() error { return g.beforeWatch(ctx) }, 0)
	g.watchEnded(time.Second, 10*time.Minute)
	step("the relist after a 410 (the watch's early end)", func() error { return g.beforeList(ctx) }, 1)
	g.listDone(nil)
	step("the watch after that relist", func() error { return g.beforeWatch(ctx) }, 0)
}
