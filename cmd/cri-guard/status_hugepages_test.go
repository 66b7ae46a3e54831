package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cri-guard/cri-guard/internal/admin"
)

// TestPrintStatusHugePages: the table shows the huge page pool, and how
// memory.available counts it, only when the node has one.
func TestPrintStatusHugePages(t *testing.T) {
	for _, tc := range []struct {
		pool *admin.HugePages
		want string // "" : no line
	}{
		{&admin.HugePages{Bytes: 1 << 30, Subtracted: true}, "huge pages:  1Gi, taken off memory.available (kubelet 1.37)"},
		{&admin.HugePages{Bytes: 6 << 20}, "huge pages:  6Mi, counted as available (kubelet 1.36 and older)"},
		{nil, ""},
	} {
		var b bytes.Buffer
		if err := printStatus(&b, admin.Status{HugePages: tc.pool}); err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(b.String(), "huge pages:")
		if tc.want == "" && got || tc.want != "" && !strings.Contains(b.String(), tc.want) {
			t.Errorf("pool %+v: status\n%s\nwant %q", tc.pool, b.String(), tc.want)
		}
	}
}
