package checkpoint

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	fileSuffix  = ".json"
	tempMarker  = ".tmp-"
	maxUIDBytes = 200
)

// checkUID accepts UIDs that can be part of a file name on their own:
// non-empty, at most 200 bytes, letters, digits and "-_.:" only, not
// starting with a dot. Kubernetes UIDs are UUIDs; crictl users may pick
// other names.
func checkUID(uid string) error {
	if uid == "" || len(uid) > maxUIDBytes || uid[0] == '.' {
		return fmt.Errorf("pod uid %q: %w", uid, errInvalidKey)
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return fmt.Errorf("pod uid %q: %w", uid, errInvalidKey)
		}
	}
	return nil
}

// fileName is the checkpoint file name of a sandbox attempt.
func fileName(uid string, attempt uint32) (string, error) {
	if err := checkUID(uid); err != nil {
		return "", err
	}
	return uid + "_" + strconv.FormatUint(uint64(attempt), 10) + fileSuffix, nil
}

// keyFileName maps a pod key "<uid>/<attempt>" to its file name.
func keyFileName(key string) (string, error) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", fmt.Errorf("key %q: %w", key, errInvalidKey)
	}
	attempt, err := strconv.ParseUint(key[i+1:], 10, 32)
	if err != nil {
		return "", fmt.Errorf("key %q: %w", key, errInvalidKey)
	}
	return fileName(key[:i], uint32(attempt))
}

// isRecordFile reports whether a directory entry name is a checkpoint file
// (not a temp file, not the quarantine directory).
func isRecordFile(name string) bool {
	return strings.HasSuffix(name, fileSuffix) && !strings.HasPrefix(name, ".")
}

// isTempFile reports whether name is a temp file left by an interrupted Put.
func isTempFile(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMarker)
}
