package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0". It is only
// written by the linker.
var version = "dev"

func versionString() string {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("cri-guard %s%s %s %s/%s", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
