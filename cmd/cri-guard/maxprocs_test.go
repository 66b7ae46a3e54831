package main

import (
	"runtime"
	"testing"
)

func TestSetMaxProcs(t *testing.T) {
	orig := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(orig) })
	tests := []struct {
		name string
		env  string
		want int
	}{
		{"unset: one P", "", 1},
		{"set: left to the runtime", "3", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runtime.GOMAXPROCS(3)
			setMaxProcs(func(k string) string {
				if k == "GOMAXPROCS" {
					return tt.env
				}
				return ""
			})
			if got := runtime.GOMAXPROCS(0); got != tt.want {
				t.Errorf("GOMAXPROCS = %d, want %d", got, tt.want)
			}
		})
	}
}
