// Package checkpoint keeps one durable record per pod sandbox attempt under a
// state directory, so that cri-guard can replay its admitted pods after a
// restart.
//
// Each record is a file "<uid>_<attempt>.json" holding a versioned envelope
// with a SHA-256 checksum over the exact payload bytes:
//
//	{"version":1,"checksum":"sha256:<hex>","payload":{...}}
//
// Writes are atomic (unique temp file in the same directory, write, fsync,
// rename, fsync the directory). A file that is corrupt, truncated, fails its
// checksum or has an unknown version is moved to "<dir>/quarantine/" and
// logged; it never stops the store. A file over maxRecordSize is
// quarantined without being read whole. A record that would be larger is
// written without its largest labels and annotations, never those the
// critical rules classify the pod by (WithRules: the configured priority
// key included) nor the grace period's.
//
// One store per directory: New takes an exclusive flock on "<dir>/.lock"
// (a second cri-guard on the same state directory is refused: errLocked)
// and warns when the directory is a symlink or writable by others. Close
// releases it. A directory that cannot be opened for any other reason (a
// read-only file system, a path that cannot be created, a ".lock" that
// cannot be opened) is not a reason to stop serving the kubelet:
// OpenDeferred serves without it (ErrUnavailable) until a background
// attempt opens it.
//
// A Writer makes records durable off its caller's goroutine (the sync
// loop), one write per record under way and a bounded number at once.
//
// Package checkpoint imports only the internal package pod.
package checkpoint
