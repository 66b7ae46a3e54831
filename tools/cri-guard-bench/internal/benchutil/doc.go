// Package benchutil is what several of cri-guard-bench's experiments use:
// a cri-guard child process (StartChild) and its CPU time and memory from
// /proc (ReadProcStats), a CRI client (Dial), the run of a subcommand
// (Subcommand: flags, signals, exit codes), the removal of what a run made
// in containerd (Cleanup, by BenchLabel) and in the cgroup tree, and the
// number formats of the tables. It measures nothing itself: each
// experiment's package (overhead, race, idle, maxprocs, apicost, fleet)
// says what it measures and how to run it.
package benchutil
