package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// version is the envelope version this package writes and reads.
const version = 1

// checksumPrefix names the checksum algorithm in the envelope.
const checksumPrefix = "sha256:"

// Record is the durable state of one pod sandbox attempt.
type Record struct {
	// Pod is the pod as cri-guard derived it; its Key() names the record.
	Pod pod.Pod `json:"pod"`
	// State is the sandbox state: pending (admitted, forwarded), ready
	// (containerd created it) or stopped.
	State pod.State `json:"state"`
	// SandboxID is containerd's sandbox id, empty while pending.
	SandboxID string `json:"sandboxId,omitempty"`
	// Written is when the record was last written (set by Put).
	Written time.Time `json:"written"`
}

// envelope is the on-disk wrapper; Payload is kept as raw bytes so that the
// checksum is verified over exactly what was written.
type envelope struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Payload  json.RawMessage `json:"payload"`
}

// encode renders r as an envelope. The envelope is assembled by hand so the
// payload bytes on disk are exactly the bytes that were hashed.
func encode(r Record) ([]byte, error) {
	payload, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint %q: %w", r.Pod.Key(), err)
	}
	sum := sha256.Sum256(payload)
	var b bytes.Buffer
	b.Grow(len(payload) + 128)
	fmt.Fprintf(&b, `{"version":%d,"checksum":"%s%s","payload":`, version, checksumPrefix, hex.EncodeToString(sum[:]))
	b.Write(payload)
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// decode parses and verifies an envelope. Every failure wraps errCorrupt.
func decode(data []byte) (Record, error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return Record{}, fmt.Errorf("%w: envelope: %v", errCorrupt, err)
	}
	if env.Version != version {
		return Record{}, fmt.Errorf("%w: unknown version %d", errCorrupt, env.Version)
	}
	want, ok := bytes.CutPrefix([]byte(env.Checksum), []byte(checksumPrefix))
	if !ok {
		return Record{}, fmt.Errorf("%w: checksum %q: unknown algorithm", errCorrupt, env.Checksum)
	}
	sum := sha256.Sum256(env.Payload)
	if hex.EncodeToString(sum[:]) != string(want) {
		return Record{}, fmt.Errorf("%w: checksum mismatch", errCorrupt)
	}
	var r Record
	if err := json.Unmarshal(env.Payload, &r); err != nil {
		return Record{}, fmt.Errorf("%w: payload: %v", errCorrupt, err)
	}
	if err := validate(r); err != nil {
		return Record{}, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	return r, nil
}

// validate checks what a record must carry to be replayed.
func validate(r Record) error {
	if err := checkUID(r.Pod.UID); err != nil {
		return err
	}
	switch r.State {
	case pod.StatePending, pod.StateReady, pod.StateStopped:
	default:
		return fmt.Errorf("record %q: unknown state %q", r.Pod.Key(), r.State)
	}
	return nil
}

// Sentinel errors, compared with errors.Is.
var (
	// ErrNotFound: no record for the key.
	ErrNotFound = errors.New("checkpoint not found")
	// errCorrupt: the file exists but cannot be trusted (bad JSON,
	// truncated, checksum mismatch, unknown version, invalid content).
	errCorrupt = errors.New("checkpoint corrupt")
	// errInvalidKey: the pod UID or key cannot name a checkpoint file.
	errInvalidKey = errors.New("invalid checkpoint key")
	// errLocked: another process holds the state directory's lock (another
	// cri-guard uses the directory).
	errLocked = errors.New("lock held")
	// ErrUnavailable: the state directory is not open (Deferred): nothing
	// was written; the caller keeps the record and writes it again.
	ErrUnavailable = errors.New("checkpoint store unavailable")
)
