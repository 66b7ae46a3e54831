package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// guardLogLine is what the maxprocs bench reads of a line of cri-guard's
// JSON log.
type guardLogLine struct {
	Time   time.Time
	Msg    string
	Pod    string
	PodUID string
}

// cri-guard's log messages the bench waits for.
const (
	msgEvicting = "evicting pod" // the decision (evictor.Synchronize)
	msgEvicted  = "pod evicted"  // its outcome recorded (guard.settleEviction)
)

// guardLogTime is the layout of cri-guard's log timestamps (milliseconds).
const guardLogTime = "2006-01-02T15:04:05.000Z07:00"

// parseGuardLogLine parses one line of cri-guard's JSON log (--log-format
// json); ok is false for a line that is not one.
func parseGuardLogLine(line []byte) (guardLogLine, bool) {
	var raw struct {
		Time   string `json:"time"`
		Msg    string `json:"msg"`
		Pod    string `json:"pod"`
		PodUID string `json:"pod_uid"`
	}
	if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &raw) != nil {
		return guardLogLine{}, false
	}
	t, err := time.Parse(guardLogTime, raw.Time)
	if err != nil {
		return guardLogLine{}, false
	}
	return guardLogLine{Time: t, Msg: raw.Msg, Pod: raw.Pod, PodUID: raw.PodUID}, true
}

// logTail reads the lines appended to a file since the last call.
type logTail struct {
	path    string
	off     int64
	partial []byte
}

// next returns the complete lines written since the last call.
func (t *logTail) next() ([]guardLogLine, error) {
	f, err := os.Open(t.path)
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
func (t *logTail) feed(b []byte) []guardLogLine {
	buf := append(t.partial, b...)
	var out []guardLogLine
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		if l, ok := parseGuardLogLine(buf[:i]); ok {
			out = append(out, l)
		}
		buf = buf[i+1:]
	}
	t.partial = append([]byte(nil), buf...)
	return out
}

// latencySummary is the distribution of a sample of durations.
type latencySummary struct {
	n                int
	median, p90, max time.Duration
}

func summarizeLatencies(ds []time.Duration) latencySummary {
	if len(ds) == 0 {
		return latencySummary{}
	}
	return latencySummary{n: len(ds), median: percentile(ds, 50), p90: percentile(ds, 90), max: slices.Max(ds)}
}

// fmtMs1 prints a duration in milliseconds with one decimal.
func fmtMs1(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

// cpuRate is CPU seconds per wall second.
func cpuRate(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return cpu.Seconds() / wall.Seconds()
}

// rateRange is the mean and extremes of CPU rates over blocks.
type rateRange struct{ mean, min, max float64 }

func summarizeRates(rs []float64) rateRange {
	if len(rs) == 0 {
		return rateRange{}
	}
	s := 0.0
	for _, r := range rs {
		s += r
	}
	return rateRange{mean: s / float64(len(rs)), min: slices.Min(rs), max: slices.Max(rs)}
}

func (r rateRange) String() string {
	return fmt.Sprintf("%.3f (%.3f-%.3f)", r.mean, r.min, r.max)
}
