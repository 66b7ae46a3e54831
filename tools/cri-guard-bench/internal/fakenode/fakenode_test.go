package fakenode

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-guard/cri-guard/internal/pod"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

func TestParseGuardLogLine(t *testing.T) {
	tests := []struct {
		name string
		line string
		want LogLine
		ok   bool
	}{
		{"decision", `{"component":"evictor","level":"warning","msg":"evicting pod","pod":"maxprocs-0003","pod_uid":"u3","time":"2026-12-02T13:36:12.345Z"}`,
			LogLine{Time: time.Date(2026, 12, 2, 13, 36, 12, 345e6, time.UTC), Msg: MsgEvicting, Pod: "maxprocs-0003", PodUID: "u3"}, true},
		{"other message", `{"level":"info","msg":"restore done","time":"2026-12-02T13:36:08.365+01:00"}`,
			LogLine{Time: time.Date(2026, 12, 2, 13, 36, 8, 365e6, time.FixedZone("", 3600)), Msg: "restore done"}, true},
		{"text format", `time="2026-12-02T13:36:12.345Z" level=warning msg="evicting pod"`, LogLine{}, false},
		{"no time", `{"msg":"evicting pod"}`, LogLine{}, false},
		{"empty", ``, LogLine{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseLogLine([]byte(tt.line))
			if ok != tt.ok || !got.Time.Equal(tt.want.Time) || got.Msg != tt.want.Msg || got.Pod != tt.want.Pod || got.PodUID != tt.want.PodUID {
				t.Errorf("parseLogLine = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cri-guard.log")
	line := func(msg string) string {
		return `{"msg":"` + msg + `","time":"2026-12-02T13:36:12.345Z"}` + "\n"
	}
	write := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(f, s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	msgs := func(ls []LogLine) string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Msg)
		}
		return strings.Join(out, ",")
	}
	tail := &LogTail{Path: path}
	write(line("a") + line("b"))
	half := line("c")
	write(half[:10])
	got, err := tail.Next()
	if err != nil || msgs(got) != "a,b" {
		t.Fatalf("first next = %q, %v; want a,b", msgs(got), err)
	}
	write(half[10:] + "not json\n" + line(MsgEvicting))
	if got, err = tail.Next(); err != nil || msgs(got) != "c,"+MsgEvicting {
		t.Fatalf("second next = %q, %v; want the finished line and the next", msgs(got), err)
	}
	if got, err = tail.Next(); err != nil || len(got) != 0 {
		t.Fatalf("third next = %q, %v; want nothing", msgs(got), err)
	}
}

// TestFakeCRIAdoption: the fake runtime's sandboxes are adopted as the
// pods they stand for (UID, Burstable from the cgroup parent, no warning).
func TestFakeCRIAdoption(t *testing.T) {
	p := Pod("maxprocs-0007", "cri-guard-maxprocs", 7, "n1")
	p.UID = "uid-7"
	sock := filepath.Join(t.TempDir(), "cri.sock")
	f, err := StartCRI(sock, []*runtimeapi.PodSandboxConfig{SandboxConfig(p)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	conn, c, err := benchutil.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	l, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("ListPodSandbox = %v, %v", l, err)
	}
	st, err := c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: l.Items[0].Id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := pod.FromSandboxStatus(st.GetStatus(), st.GetInfo(), pod.CriticalRules{})
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != "uid-7" || got.QOS != pod.Burstable || len(got.Warnings) > 0 || got.State != pod.StateReady {
		t.Errorf("adopted %+v", got)
	}
	if _, err := c.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: l.Items[0].Id}); err != nil {
		t.Fatal(err)
	}
}
