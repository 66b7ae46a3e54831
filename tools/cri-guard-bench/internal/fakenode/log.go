package fakenode

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"time"
)

// LogLine is what a bench reads of a line of cri-guard's JSON log.
type LogLine struct {
	Time   time.Time
	Msg    string
	Pod    string
	PodUID string
}

// cri-guard's log messages a bench waits for.
const (
	MsgEvicting = "evicting pod" // the decision (evictor.Synchronize)
	MsgEvicted  = "pod evicted"  // its outcome recorded (guard.settleEviction)
)

// logTime is the layout of cri-guard's log timestamps (milliseconds).
const logTime = "2006-01-02T15:04:05.000Z07:00"

// parseLogLine parses one line of cri-guard's JSON log (--log-format
// json); ok is false for a line that is not one.
func parseLogLine(line []byte) (LogLine, bool) {
	var raw struct {
		Time   string `json:"time"`
		Msg    string `json:"msg"`
		Pod    string `json:"pod"`
		PodUID string `json:"pod_uid"`
	}
	if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &raw) != nil {
		return LogLine{}, false
	}
	t, err := time.Parse(logTime, raw.Time)
	if err != nil {
		return LogLine{}, false
	}
	return LogLine{Time: t, Msg: raw.Msg, Pod: raw.Pod, PodUID: raw.PodUID}, true
}

// LogTail reads the lines appended to a file since the last call.
type LogTail struct {
	Path    string
	off     int64
	partial []byte
}

// Next returns the complete lines written since the last call.
func (t *LogTail) Next() ([]LogLine, error) {
	f, err := os.Open(t.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	t.off += int64(len(b))
	return t.feed(b), nil
}

// feed splits b (after what an earlier call left unfinished) into lines.
func (t *LogTail) feed(b []byte) []LogLine {
	buf := append(t.partial, b...)
	var out []LogLine
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		if l, ok := parseLogLine(buf[:i]); ok {
			out = append(out, l)
		}
		buf = buf[i+1:]
	}
	t.partial = append([]byte(nil), buf...)
	return out
}
