package config

import (
	"strings"
	"testing"
)

func TestKubeletCompatibility(t *testing.T) {
	tests := []struct {
		name, yaml   string
		want         KubeletRelease
		wantSubtract bool
		wantErr      string
	}{
		{name: "default is the newest", yaml: "", want: kubelet137, wantSubtract: true},
		{name: "1.37 quoted", yaml: `kubeletCompatibility: "1.37"`, want: kubelet137, wantSubtract: true},
		{name: "1.37 unquoted", yaml: "kubeletCompatibility: 1.37", want: kubelet137, wantSubtract: true},
		{name: "1.36", yaml: `kubeletCompatibility: "1.36"`, want: kubelet136},
		{name: "1.35 unquoted", yaml: "kubeletCompatibility: 1.35", want: kubelet135},
		{name: "an unknown release", yaml: `kubeletCompatibility: "1.38"`,
			wantErr: `kubeletCompatibility: must be 1.35, 1.36 or 1.37 (the kubelet release whose memory.available cri-guard computes), got "1.38"`},
		{name: "a patch release", yaml: `kubeletCompatibility: "1.37.2"`, wantErr: `kubeletCompatibility: must be 1.35, 1.36 or 1.37`},
		{name: "empty", yaml: `kubeletCompatibility: ""`, wantErr: `kubeletCompatibility: must be`},
		{name: "not a release", yaml: "kubeletCompatibility: [1]", wantErr: "kubeletCompatibility: want a kubelet release"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.KubeletCompatibility != tc.want || c.SubtractHugePages() != tc.wantSubtract {
				t.Errorf("release %q subtract %v, want %q %v", c.KubeletCompatibility, c.SubtractHugePages(), tc.want, tc.wantSubtract)
			}
		})
	}
}
