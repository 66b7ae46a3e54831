package main

import (
	"os"

	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/apicost"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/fleet"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/idle"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/maxprocs"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/overhead"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/race"
)

// subcommands are the experiments named by the first argument; each takes
// the arguments after it and returns the exit code.
var subcommands = map[string]func(args []string) int{
	"serve-core": overhead.ServeCoreMain,
	"race":       race.Main,
	"idle":       idle.Main,
	"maxprocs":   maxprocs.Main,
	"fleet":      fleet.Main,
	"apicost":    apicost.Main,
}

func main() {
	if len(os.Args) > 1 {
		if run, ok := subcommands[os.Args[1]]; ok {
			os.Exit(run(os.Args[2:]))
		}
	}
	os.Exit(overhead.Main(os.Args[1:]))
}
