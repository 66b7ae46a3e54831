// Package metrics exposes cri-guard's Prometheus series (cri_guard_*) on a
// registry of its own, never the global one.
//
// It owns the series and how they are fed: Metrics.Observe is the server's
// per-call Observer (latency histogram and error count per CRI method),
// Metrics.Decided is the evictor's Observer (admissions, evictions),
// InstrumentStore wraps the checkpoint store the sync loop writes through,
// and a Collector reads the eviction manager's snapshot (observations and
// its evaluation of the thresholds in force) and the runtime connection
// state at scrape time, so no goroutine polls.
// Serve serves /metrics with promhttp.
//
// It imports evictor, pressure and checkpoint for their types; it must not
// import server, guard or cmd (it satisfies their interfaces structurally).
package metrics
