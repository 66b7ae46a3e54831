package pod_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
	"github.com/cri-guard/cri-guard/internal/pod"
)

var uidCases = []struct {
	name string
	uid  string
	ok   bool
}{
	{"uuid", "0f6b8c4e-2d1a-4e59-9c3b-7a5f1e2d3c4b", true},
	{"static pod hash", "3c1d2e4f5a6b7c8d9e0f1a2b3c4d5e6f", true},
	{"crictl name", "sandbox_1.a:b", true},
	{"longest", strings.Repeat("u", pod.MaxUIDBytes), true},
	{"empty", "", false},
	{"dot", ".", false},
	{"dot dot", "..", false},
	{"hidden", ".uid", false},
	{"slash", "bad/uid", false},
	{"traversal", "../../etc/x", false},
	{"300 bytes", strings.Repeat("u", 300), false},
	{"one too long", strings.Repeat("u", pod.MaxUIDBytes+1), false},
	{"space", "a b", false},
	{"nul", "a\x00b", false},
	{"non-ascii", "pöd", false},
}

// TestFromSandboxConfigRejectsBadUID: a UID that cannot name a checkpoint
// file is ErrInvalid (the server's InvalidArgument), before anything else.
func TestFromSandboxConfigRejectsBadUID(t *testing.T) {
	for _, tt := range uidCases {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: tt.uid}}
			_, err := pod.FromSandboxConfig(cfg, "", pod.CriticalRules{Mode: pod.ModeModern}, time.Now())
			if tt.ok && err != nil {
				t.Fatalf("uid %q refused: %v", tt.uid, err)
			}
			if !tt.ok && !errors.Is(err, pod.ErrInvalid) {
				t.Fatalf("uid %q: err = %v, want ErrInvalid", tt.uid, err)
			}
		})
	}
}

// TestCheckUIDAgreesWithCheckpointStore: every UID CheckUID accepts can be
// stored, every one it refuses the store refuses too (no InvalidArgument for
// a storable UID, no Internal from the store for an admitted one).
func TestCheckUIDAgreesWithCheckpointStore(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	st, err := checkpoint.New(t.TempDir(), logrus.NewEntry(log))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range uidCases {
		t.Run(tt.name, func(t *testing.T) {
			checked := pod.CheckUID(tt.uid) == nil
			stored := st.Put(checkpoint.Record{Pod: pod.Pod{UID: tt.uid, Name: "p", Namespace: "default"}, State: pod.StatePending}) == nil
			if checked != tt.ok || stored != tt.ok {
				t.Errorf("uid %q: CheckUID ok %v, store ok %v, want %v", tt.uid, checked, stored, tt.ok)
			}
		})
	}
}
