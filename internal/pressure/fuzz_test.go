package pressure

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func FuzzParseMemoryStat(f *testing.F) {
	f.Add([]byte("anon 12\ninactive_file 4096\nactive_file 1\n"), "inactive_file")
	f.Add([]byte("total_inactive_file 18446744073709551615\n"), "total_inactive_file")
	f.Add([]byte("inactive_file 18446744073709551616\n"), "inactive_file")
	f.Add([]byte("inactive_file\n"), "inactive_file")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		v, err := parseKVValue(b, key)
		if err != nil {
			if v != 0 {
				t.Errorf("value %d with error %v", v, err)
			}
			return
		}
		// A found key appears at the start of a line.
		if !strings.HasPrefix(string(b), key+" ") && !strings.Contains(string(b), "\n"+key+" ") {
			t.Errorf("key %q reported found in %q", key, b)
		}
		if _, err := parseKVValue(b, key+"\x00absent"); !errors.Is(err, errKeyNotFound) && !strings.Contains(key, "\n") {
			t.Errorf("absent key: %v", err)
		}
	})
}

func FuzzParsePressure(f *testing.F) {
	f.Add([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Add([]byte("some avg10=55.12 avg60=30.50 avg300=10.25 total=123456789\n"))
	f.Add([]byte("some avg10=100.00 avg60=0 avg300=0.5 total=1 extra=7\n"))
	f.Add([]byte("full avg10=1.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		some, full, _, err := parsePressure(b)
		if err != nil {
			return
		}
		for _, p := range []PSI{some, full} {
			for _, v := range []float64{p.Avg10, p.Avg60, p.Avg300} {
				if math.IsNaN(v) || v < 0 || v > 100 {
					t.Errorf("average %v out of [0,100] from %q", v, b)
				}
			}
		}
	})
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte("MemTotal:       24683620 kB\nMemFree:        23252524 kB\nMemAvailable:   24122796 kB\n"))
	f.Add([]byte("MemTotal: 1 kB\nMemAvailable: 2 kB\nHugePages_Total:       0\n"))
	f.Add([]byte("MemTotal: 9007199254740992 kB\nMemAvailable: 0 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMeminfo(b)
		if err != nil {
			return
		}
		if m.TotalBytes <= 0 || m.AvailableBytes < 0 || m.FreeBytes < 0 {
			t.Errorf("meminfo %+v from %q", m, b)
		}
	})
}

func FuzzParseThresholds(f *testing.F) {
	f.Add("memory.available", "100Mi", "memory.pressure.some.avg10", "20%", "30s", "200Mi")
	f.Add("allocatableMemory.available", "10%", "memory.available", "1e3", "1m", "5%")
	f.Add("memory.pressure.full.avg60", "99.9%%", "nodefs.available", "0%", "-1s", "-1")
	f.Fuzz(func(t *testing.T, hardSig, hardVal, softSig, softVal, grace, reclaim string) {
		cfg := ThresholdConfig{
			Hard:            map[string]string{hardSig: hardVal},
			Soft:            map[string]string{softSig: softVal},
			SoftGracePeriod: map[string]string{softSig: grace},
			MinimumReclaim:  map[string]string{hardSig: reclaim},
		}
		th, err := ParseThresholds(cfg)
		if err != nil {
			if !strings.Contains(err.Error(), "[") {
				t.Errorf("error does not name its field: %v", err)
			}
			return
		}
		e := NewEvaluator(th, 0)
		for _, x := range th {
			_ = x.String()
			if x.Value.Quantity == nil && (math.IsNaN(x.Value.Percentage) || x.Value.Percentage <= 0 || x.Value.Percentage > 1) {
				t.Errorf("percentage %v accepted from %+v", x.Value.Percentage, cfg)
			}
			if !x.Hard && x.GracePeriod < 0 {
				t.Errorf("negative grace accepted: %+v", cfg)
			}
		}
		r := e.Evaluate(time.Unix(0, 0), obsFor(0, 100))
		for _, m := range r.Met {
			_ = m.String()
		}
	})
}
