package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// auditEvent is what the fleet bench reads of a kube-apiserver audit event
// (audit.k8s.io/v1, Metadata level).
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	SourceIPs []string `json:"sourceIPs"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

func (e *auditEvent) resource() (string, string) {
	if e.ObjectRef == nil {
		return "", ""
	}
	return e.ObjectRef.Resource, e.ObjectRef.Subresource
}

func (e *auditEvent) code() int {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// reqKind is the fleet bench's class of a request.
type reqKind int

const (
	kindOther reqKind = iota
	kindWatch
	kindList // a list, or a watch that streams the initial list (sendInitialEvents=true)
	kindNodeWrite
	kindNodeGetEtcd  // a Node GET without a resourceVersion: read from etcd
	kindNodeGetCache // a Node GET with one: served from the watch cache
	kindPodStatus
	kindEvent
	numKinds
)

var kindNames = [numKinds]string{"other", "watch", "list", "node_write", "node_get_etcd", "node_get_cache", "pod_status_write", "event_write"}

func (k reqKind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("kind(%d)", int(k))
	}
	return kindNames[k]
}

// MarshalText names the kind in the JSON output.
func (k reqKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// classify is the class of a request. The query is read from the request
// URI: the audit event does not carry resourceVersion or sendInitialEvents
// otherwise.
func classify(e *auditEvent) reqKind {
	res, sub := e.resource()
	q := url.Values{}
	if _, raw, ok := strings.Cut(e.RequestURI, "?"); ok {
		q, _ = url.ParseQuery(raw)
	}
	switch {
	case e.Verb == "watch" && q.Get("sendInitialEvents") == "true":
		return kindList
	case e.Verb == "watch":
		return kindWatch
	case e.Verb == "list":
		return kindList
	case res == "nodes" && (e.Verb == "update" || e.Verb == "patch"):
		return kindNodeWrite
	case res == "nodes" && sub == "" && e.Verb == "get":
		if q.Get("resourceVersion") == "" {
			return kindNodeGetEtcd
		}
		return kindNodeGetCache
	case res == "pods" && sub == "status" && (e.Verb == "update" || e.Verb == "patch"):
		return kindPodStatus
	case res == "events" && (e.Verb == "create" || e.Verb == "patch" || e.Verb == "update"):
		return kindEvent
	}
	return kindOther
}

// fleetRequest is one request, counted once.
type fleetRequest struct {
	at                  time.Time
	user                string
	verb, resource, sub string
	name                string // the object's
	credID              string // the user's credential ID (a token's "JTI=<jti>"), if the server gave one
	sourceIP            string // the first of the request's source addresses
	code                int
	kind                reqKind
	relist              bool
}

// requestDedup turns audit events into requests: a watch at its
// ResponseStarted stage (its ResponseComplete comes when it ends, possibly
// never before the server stops), anything else at ResponseComplete; a
// watch refused before it started has only the latter.
type requestDedup struct {
	started map[string]bool
}

func newRequestDedup() *requestDedup { return &requestDedup{started: map[string]bool{}} }

func (d *requestDedup) request(e *auditEvent) (fleetRequest, bool) {
	switch {
	case e.Stage == "ResponseStarted" && e.Verb == "watch":
		d.started[e.AuditID] = true
	case e.Stage == "ResponseComplete" && e.Verb == "watch" && d.started[e.AuditID]:
		delete(d.started, e.AuditID)
		return fleetRequest{}, false
	case e.Stage == "ResponseComplete":
	default:
		return fleetRequest{}, false
	}
	res, sub := e.resource()
	r := fleetRequest{at: e.RequestReceivedTimestamp, user: e.User.Username, verb: e.Verb, resource: res, sub: sub,
		code: e.code(), kind: classify(e)}
	if e.ObjectRef != nil {
		r.name = e.ObjectRef.Name
	}
	if ids := e.User.Extra[credentialIDKey]; len(ids) > 0 {
		r.credID = ids[0]
	}
	if len(e.SourceIPs) > 0 {
		r.sourceIP = e.SourceIPs[0]
	}
	return r, true
}

// readAudit reads the requests of an audit log (one JSON event a line); a
// line that is not an event is an error naming it.
func readAudit(r io.Reader, d *requestDedup) ([]fleetRequest, error) {
	var out []fleetRequest
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var e auditEvent
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("audit line %d: %w", n, err)
		}
		if req, ok := d.request(&e); ok {
			out = append(out, req)
		}
	}
	return out, sc.Err()
}

// markRelists sets relist on every list of a user and resource after its
// first: a watch that ends with 410 Expired does so inside a 200 stream,
// which the audit log does not show, so any later list is a relist.
func markRelists(reqs []fleetRequest) {
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].at.Before(reqs[j].at) })
	seen := map[[2]string]bool{}
	for i := range reqs {
		r := &reqs[i]
		if r.kind != kindList {
			continue
		}
		k := [2]string{r.user, r.resource}
		r.relist = seen[k]
		seen[k] = true
	}
}

// fleetPhase is a stretch of the run.
type fleetPhase struct {
	Name       string               `json:"name"`
	Start      time.Time            `json:"start"`
	End        time.Time            `json:"end"`
	Back       time.Time            `json:"api_back,omitzero"` // restart: when the API server was ready again
	CPUSeconds float64              `json:"apiserver_cpu_seconds"`
	Bytes      map[string]byteCount `json:"bytes"` // by fleet
}

func (p fleetPhase) minutes() float64 { return p.End.Sub(p.Start).Minutes() }

// kindCounts are requests by kind.
type kindCounts [numKinds]int

// MarshalJSON writes the counts by kind name.
func (c kindCounts) MarshalJSON() ([]byte, error) {
	m := map[string]int{}
	for k, n := range c {
		m[reqKind(k).String()] = n
	}
	return json.Marshal(m)
}

// fleetAgg is one fleet's requests in one phase.
type fleetAgg struct {
	Kinds       kindCounts `json:"kinds"`
	Relists     int        `json:"relists"`
	PeakPerSec  int        `json:"peak_requests_per_second"`
	NodesActive int        `json:"nodes_with_requests"`
	// Restart: per node, the successful relists of the phase, in seconds
	// after the API server was ready again (below 0: served before its
	// readyz said so).
	RelistAfterBack map[string][]float64 `json:"relists_after_back,omitempty"`
}

// rawKey is one row of the raw counts.
type rawKey struct {
	Phase, Fleet, Verb, Resource, Subresource string
	Code                                      int
	Kind                                      reqKind
	Relist                                    bool
}

// rawCount is a rawKey with its count, for the JSON output.
type rawCount struct {
	Phase       string  `json:"phase"`
	Fleet       string  `json:"fleet"`
	Verb        string  `json:"verb"`
	Resource    string  `json:"resource"`
	Subresource string  `json:"subresource,omitempty"`
	Code        int     `json:"code"`
	Kind        reqKind `json:"kind"`
	Relist      bool    `json:"relist,omitempty"`
	Count       int     `json:"count"`
}

// fleetAggregate is every phase's counts by fleet ("all": every user,
// the bench's own and the API server's included).
type fleetAggregate struct {
	Phases map[string]map[string]*fleetAgg `json:"phases"`
	Raw    []rawCount                      `json:"raw"`
}

// fleetOfUser is the fleet of a node user (system:node:<fleet>-<i>) and
// the node; ok is false for any other user.
func fleetOfUser(user string, fleets []string) (fleet, node string, ok bool) {
	node, ok = strings.CutPrefix(user, "system:node:")
	if !ok {
		return "", "", false
	}
	for _, f := range fleets {
		if strings.HasPrefix(node, f+"-") {
			return f, node, true
		}
	}
	return "", "", false
}

// aggregateFleet counts the requests (relists marked) by phase and fleet.
// A request outside every phase is left out.
func aggregateFleet(reqs []fleetRequest, phases []fleetPhase, fleets []string) fleetAggregate {
	agg := fleetAggregate{Phases: map[string]map[string]*fleetAgg{}}
	raw := map[rawKey]int{}
	type bucketKey struct {
		phase, fleet string
		sec          int64
	}
	buckets := map[bucketKey]int{}
	active := map[[3]string]bool{}
	for _, p := range phases {
		agg.Phases[p.Name] = map[string]*fleetAgg{"all": {}}
		for _, f := range fleets {
			agg.Phases[p.Name][f] = &fleetAgg{}
		}
	}
	for _, r := range reqs {
		i := slices.IndexFunc(phases, func(p fleetPhase) bool { return !r.at.Before(p.Start) && r.at.Before(p.End) })
		if i < 0 {
			continue
		}
		p := phases[i]
		sec := r.at.Unix()
		buckets[bucketKey{p.Name, "all", sec}]++
		agg.Phases[p.Name]["all"].Kinds[r.kind]++
		f, node, ok := fleetOfUser(r.user, fleets)
		if !ok {
			continue
		}
		a := agg.Phases[p.Name][f]
		a.Kinds[r.kind]++
		if r.relist {
			a.Relists++
		}
		buckets[bucketKey{p.Name, f, sec}]++
		active[[3]string{p.Name, f, node}] = true
		if r.relist && !p.Back.IsZero() && r.code == 200 {
			if a.RelistAfterBack == nil {
				a.RelistAfterBack = map[string][]float64{}
			}
			a.RelistAfterBack[node] = append(a.RelistAfterBack[node], r.at.Sub(p.Back).Seconds())
		}
		raw[rawKey{p.Name, f, r.verb, r.resource, r.sub, r.code, r.kind, r.relist}]++
	}
	for k, n := range buckets {
		a := agg.Phases[k.phase][k.fleet]
		a.PeakPerSec = max(a.PeakPerSec, n)
	}
	for k := range active {
		agg.Phases[k[0]][k[1]].NodesActive++
	}
	for k, n := range raw {
		agg.Raw = append(agg.Raw, rawCount{Phase: k.Phase, Fleet: k.Fleet, Verb: k.Verb, Resource: k.Resource, Subresource: k.Subresource,
			Code: k.Code, Kind: k.Kind, Relist: k.Relist, Count: n})
	}
	sort.Slice(agg.Raw, func(i, j int) bool {
		a, b := agg.Raw[i], agg.Raw[j]
		return fmt.Sprint(a.Phase, a.Fleet, a.Verb, a.Resource, a.Subresource, a.Code, a.Relist) <
			fmt.Sprint(b.Phase, b.Fleet, b.Verb, b.Resource, b.Subresource, b.Code, b.Relist)
	})
	return agg
}

// relistSpread is, over a fleet's nodes, when each node first relisted
// after the API server came back.
type relistSpread struct {
	nodes               int // nodes that relisted
	relists             int // successful relists after the API came back
	first, median, last float64
}

func spreadOf(byNode map[string][]float64) relistSpread {
	var firsts []float64
	s := relistSpread{}
	for _, ts := range byNode {
		if len(ts) == 0 {
			continue
		}
		s.relists += len(ts)
		firsts = append(firsts, slices.Min(ts))
	}
	if len(firsts) == 0 {
		return s
	}
	slices.Sort(firsts)
	s.nodes, s.first, s.last = len(firsts), firsts[0], firsts[len(firsts)-1]
	s.median = firsts[len(firsts)/2]
	if len(firsts)%2 == 0 {
		s.median = (firsts[len(firsts)/2-1] + firsts[len(firsts)/2]) / 2
	}
	return s
}
