package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/cri-guard/cri-guard/internal/controller"
)

// The manifests' CEL expressions are not compiled here: that needs
// k8s.io/apiserver's CEL environment, which this module does not depend
// on. The test checks their structure and what they name.

const manifestDir = "../../contrib/controller"

const saUser = "system:serviceaccount:kube-system:cri-guard-controller"

// manifests parses every document of every file in manifestDir, in the
// order kubectl apply -f applies them (file name order).
func manifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestDir, err)
	}
	slices.Sort(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			var m map[string]any
			if err := yaml.Unmarshal(doc, &m); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if m == nil {
				continue
			}
			u := &unstructured.Unstructured{Object: m}
			if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
				t.Fatalf("%s document %d: no kind, apiVersion or name", f, i)
			}
			out = append(out, u)
		}
	}
	return out
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) (*unstructured.Unstructured, int) {
	t.Helper()
	for i, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o, i
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil, -1
}

func rules(t *testing.T, o *unstructured.Unstructured) []any {
	t.Helper()
	r, ok, err := unstructured.NestedSlice(o.Object, "rules")
	if !ok || err != nil {
		t.Fatalf("%s %s: no rules", o.GetKind(), o.GetName())
	}
	return r
}

func TestManifestRBAC(t *testing.T) {
	objs := manifests(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if ns := o.GetNamespace(); ns != "" && ns != "kube-system" {
			t.Errorf("%s %s in namespace %q, want kube-system", o.GetKind(), o.GetName(), ns)
		}
	}
	want := map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1,
		"Deployment": 1, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("kinds = %v, want %v", kinds, want)
	}
	find(t, objs, "ServiceAccount", "cri-guard-controller")
	cr, _ := find(t, objs, "ClusterRole", "cri-guard-controller")
	wantCR := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"nodes"}, "verbs": []any{"get", "list", "watch", "patch"}}}
	if got := rules(t, cr); !reflect.DeepEqual(got, wantCR) {
		t.Errorf("ClusterRole rules = %v, want %v", got, wantCR)
	}
	role, _ := find(t, objs, "Role", "cri-guard-controller")
	if role.GetNamespace() != "kube-system" {
		t.Errorf("Role namespace %q", role.GetNamespace())
	}
	wantRole := []any{
		map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": []any{"create"}},
		map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"},
			"resourceNames": []any{"cri-guard-controller"}, "verbs": []any{"get", "update"}},
	}
	if got := rules(t, role); !reflect.DeepEqual(got, wantRole) {
		t.Errorf("Role rules = %v, want %v", got, wantRole)
	}
	// the lease name the Role allows is the controller's default
	o, err := parseFlags(nil, nil)
	if err != nil || o.Leader.Name != "cri-guard-controller" || o.Leader.Namespace != "kube-system" {
		t.Errorf("default lease %s/%s (%v), the Role allows kube-system/cri-guard-controller", o.Leader.Namespace, o.Leader.Name, err)
	}
	for _, b := range []struct{ kind, roleKind string }{{"ClusterRoleBinding", "ClusterRole"}, {"RoleBinding", "Role"}} {
		o, _ := find(t, objs, b.kind, "cri-guard-controller")
		ref, _, _ := unstructured.NestedStringMap(o.Object, "roleRef")
		if ref["kind"] != b.roleKind || ref["name"] != "cri-guard-controller" {
			t.Errorf("%s roleRef = %v", b.kind, ref)
		}
		subs, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		wantSubs := []any{map[string]any{"kind": "ServiceAccount", "name": "cri-guard-controller", "namespace": "kube-system"}}
		if !reflect.DeepEqual(subs, wantSubs) {
			t.Errorf("%s subjects = %v, want %v", b.kind, subs, wantSubs)
		}
	}
}

func TestManifestPolicy(t *testing.T) {
	objs := manifests(t)
	p, pi := find(t, objs, "ValidatingAdmissionPolicy", "cri-guard-controller-node-taint")
	b, _ := find(t, objs, "ValidatingAdmissionPolicyBinding", "cri-guard-controller-node-taint")
	_, di := find(t, objs, "Deployment", "cri-guard-controller")
	if pi > di {
		t.Error("the policy is applied after the Deployment: the controller would run unfenced")
	}
	if name, _, _ := unstructured.NestedString(b.Object, "spec", "policyName"); name != p.GetName() {
		t.Errorf("binding policyName %q", name)
	}
	if acts, _, _ := unstructured.NestedStringSlice(b.Object, "spec", "validationActions"); !slices.Equal(acts, []string{"Deny"}) {
		t.Errorf("binding validationActions %v, want [Deny]", acts)
	}
	if fp, _, _ := unstructured.NestedString(p.Object, "spec", "failurePolicy"); fp != "Fail" {
		t.Errorf("failurePolicy %q, want Fail", fp)
	}
	mcs, _, _ := unstructured.NestedSlice(p.Object, "spec", "matchConditions")
	if len(mcs) != 1 || !strings.Contains(mcs[0].(map[string]any)["expression"].(string), "request.userInfo.username == '"+saUser+"'") {
		t.Errorf("matchConditions %v, want the controller's username %s", mcs, saUser)
	}
	rr, _, _ := unstructured.NestedSlice(p.Object, "spec", "matchConstraints", "resourceRules")
	if len(rr) != 1 || !reflect.DeepEqual(rr[0].(map[string]any)["resources"], []any{"nodes", "nodes/status"}) {
		t.Errorf("resourceRules %v, want nodes and nodes/status", rr)
	}
	vars, _, _ := unstructured.NestedSlice(p.Object, "spec", "variables")
	varExpr := map[string]string{}
	for _, v := range vars {
		m := v.(map[string]any)
		varExpr[m["name"].(string)] = m["expression"].(string)
	}
	if varExpr["key"] != "'"+controller.TaintKey+"'" {
		t.Errorf("variable key = %s, want '%s'", varExpr["key"], controller.TaintKey)
	}
	vals, _, _ := unstructured.NestedSlice(p.Object, "spec", "validations")
	var all strings.Builder
	for _, v := range vals {
		m := v.(map[string]any)
		e, _ := m["expression"].(string)
		if e == "" || m["message"] == "" {
			t.Errorf("validation without an expression or message: %v", m)
		}
		if strings.Count(e, "(") != strings.Count(e, ")") {
			t.Errorf("unbalanced parentheses: %s", e)
		}
		all.WriteString(e + "\n")
	}
	for _, field := range []string{"metadata.labels", "metadata.annotations", "metadata.finalizers", "metadata.ownerReferences",
		"spec.unschedulable", "filter(t, t.key != variables.key)", "t.effect in variables.allowedEffects"} {
		if !strings.Contains(all.String(), "object."+field) && !strings.Contains(all.String(), field) {
			t.Errorf("no validation checks %s", field)
		}
		if strings.HasPrefix(field, "metadata.") || strings.HasPrefix(field, "spec.") {
			if !strings.Contains(all.String(), "oldObject."+field) {
				t.Errorf("%s is not compared with the old object", field)
			}
		}
	}
	// the Deployment's effect is one the policy allows
	d, _ := find(t, objs, "Deployment", "cri-guard-controller")
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	args := cs[0].(map[string]any)["args"].([]any)
	for _, a := range args {
		if e, ok := strings.CutPrefix(a.(string), "--effect="); ok && !strings.Contains(varExpr["allowedEffects"], "'"+e+"'") {
			t.Errorf("Deployment runs --effect=%s, the policy allows %s", e, varExpr["allowedEffects"])
		}
	}
}

func TestManifestDeployment(t *testing.T) {
	objs := manifests(t)
	d, _ := find(t, objs, "Deployment", "cri-guard-controller")
	if d.GetNamespace() != "kube-system" {
		t.Errorf("namespace %q", d.GetNamespace())
	}
	if n, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); strings.TrimSpace(toString(n)) != "2" {
		t.Errorf("replicas %v, want 2", n)
	}
	spec, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
	if spec["serviceAccountName"] != "cri-guard-controller" {
		t.Errorf("serviceAccountName %v", spec["serviceAccountName"])
	}
	if nonRoot, _, _ := unstructured.NestedBool(spec, "securityContext", "runAsNonRoot"); !nonRoot {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	tols, _, _ := unstructured.NestedSlice(spec, "tolerations")
	tolerated := false
	for _, tol := range tols {
		m := tol.(map[string]any)
		if m["key"] == controller.TaintKey && m["operator"] == "Exists" && m["effect"] == nil {
			tolerated = true
		}
	}
	if !tolerated {
		t.Errorf("tolerations %v: the controller must tolerate %s with every effect", tols, controller.TaintKey)
	}
	if _, ok, _ := unstructured.NestedSlice(spec, "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"); !ok {
		t.Error("no preferred pod anti-affinity")
	}
	cs, _, _ := unstructured.NestedSlice(spec, "containers")
	if len(cs) != 1 {
		t.Fatalf("containers %v", cs)
	}
	c := cs[0].(map[string]any)
	if ro, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem"); !ro {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if esc, ok, _ := unstructured.NestedBool(c, "securityContext", "allowPrivilegeEscalation"); !ok || esc {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if drop, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "drop"); !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("capabilities.drop %v, want [ALL]", drop)
	}
	if _, ok, _ := unstructured.NestedMap(c, "resources", "requests"); !ok {
		t.Error("no resource requests")
	}
	if _, ok, _ := unstructured.NestedString(c, "resources", "limits", "memory"); !ok {
		t.Error("no memory limit")
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if p, _, _ := unstructured.NestedString(c, probe, "httpGet", "path"); p != path {
			t.Errorf("%s path %q, want %s", probe, p, path)
		}
	}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	o, err := parseFlags(args, nil)
	if err != nil {
		t.Fatalf("the Deployment's args do not parse: %v", err)
	}
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	if len(ports) != 1 || !strings.HasSuffix(o.MetricsAddress, ":"+strings.TrimSpace(toString(ports[0].(map[string]any)["containerPort"]))) {
		t.Errorf("containerPort %v does not match --metrics-address %s", ports, o.MetricsAddress)
	}
}

func toString(v any) string {
	b, _ := yaml.Marshal(v)
	return string(b)
}
