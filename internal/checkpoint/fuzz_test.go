package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cri-guard/cri-guard/internal/pod"
)

// FuzzDecode: decode never panics, fails only with errCorrupt, and whatever
// it accepts re-encodes to a file it accepts again, unchanged. Each input is
// tried as a whole file and, since a fuzzer cannot forge SHA-256, also as the
// payload of an envelope with a correct checksum.
func FuzzDecode(f *testing.F) {
	good, err := encode(testRecord("0e760759-7576-4c0b-89d0-bf5c9539026e", 1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	if err != nil {
		f.Fatal(err)
	}
	pending, err := encode(Record{Pod: pod.Pod{UID: "u", Namespace: "kube-system", Static: true}, State: pod.StatePending})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(pending)
	f.Add(good[:len(good)/2])
	f.Add(bytes.Replace(good, []byte(`"version":1`), []byte(`"version":2`), 1))
	f.Add([]byte(`{"version":1,"checksum":"sha256:","payload":null}`))
	f.Add([]byte(`{}`))
	f.Add([]byte{})
	f.Add([]byte(`{"pod":{"uid":"u","created":"2026-01-01T00:00:00+01:00"},"state":"ready","written":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"pod":{"uid":"u/../x"},"state":"ready"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		sum := sha256.Sum256(data)
		wrapped := fmt.Appendf(nil, `{"version":1,"checksum":"sha256:%s","payload":%s}`, hex.EncodeToString(sum[:]), data)
		checkDecode(t, wrapped)
	})
}

// checkDecode asserts the decode properties for one input.
func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	r, err := decode(data)
	if err != nil {
		if !errors.Is(err, errCorrupt) {
			t.Fatalf("decode error %v does not wrap ErrCorrupt", err)
		}
		return
	}
	enc, err := encode(r)
	if err != nil {
		t.Fatalf("accepted record does not encode: %v", err)
	}
	r2, err := decode(enc)
	if err != nil {
		t.Fatalf("re-encoded record rejected: %v", err)
	}
	enc2, err := encode(r2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(enc, enc2) {
		t.Fatalf("round trip changed the record:\n%s\n%s", enc, enc2)
	}
}
