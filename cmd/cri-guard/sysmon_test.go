package main

import (
	"slices"
	"testing"
)

func TestSysmonEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		environ []string
		want    []string // nil: no re-exec
	}{
		{name: "daemon without GODEBUG", args: []string{"--config", "/etc/cri-guard/config.yaml"},
			environ: []string{"PATH=/bin", "NOTIFY_SOCKET=/run/systemd/notify"},
			want:    []string{"PATH=/bin", "NOTIFY_SOCKET=/run/systemd/notify", "GODEBUG=schedtrace=2147483647"}},
		{name: "daemon without arguments", environ: nil, want: []string{"GODEBUG=schedtrace=2147483647"}},
		{name: "other GODEBUG settings are kept", environ: []string{"GODEBUG=madvdontneed=1", "HOME=/root"},
			want: []string{"GODEBUG=madvdontneed=1,schedtrace=2147483647", "HOME=/root"}},
		{name: "empty GODEBUG", environ: []string{"GODEBUG="}, want: []string{"GODEBUG=schedtrace=2147483647"}},
		{name: "operator's schedtrace is obeyed (opt out)", environ: []string{"GODEBUG=gctrace=1,schedtrace=0"}},
		{name: "already re-executed", environ: []string{"GODEBUG=schedtrace=2147483647"}},
		{name: "version", args: []string{"version"}, environ: []string{"PATH=/bin"}},
		{name: "status", args: []string{"status", "--json"}},
		{name: "check-config", args: []string{"check-config", "x.yaml"}},
		{name: "a GODEBUG lookalike is not GODEBUG", environ: []string{"XGODEBUG=schedtrace=0"},
			want: []string{"XGODEBUG=schedtrace=0", "GODEBUG=schedtrace=2147483647"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := sysmonEnv(tt.args, tt.environ)
			if ok != (tt.want != nil) || !slices.Equal(got, tt.want) {
				t.Fatalf("sysmonEnv = %q, %v; want %q, %v", got, ok, tt.want, tt.want != nil)
			}
		})
	}
}
