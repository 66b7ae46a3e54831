package checkpoint

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkPut measures one durable Put (write, fsync, rename, dir fsync) in
// the test's temp directory and reports p50/p99 latency besides ns/op.
func BenchmarkPut(b *testing.B) {
	s, _ := newStore(b)
	r := testRecord("0e760759-7576-4c0b-89d0-bf5c9539026e", 0, t0)
	durs := make([]time.Duration, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if err := s.Put(r); err != nil {
			b.Fatal(err)
		}
		durs = append(durs, time.Since(start))
	}
	reportPercentiles(b, durs)
}

// reportPercentiles adds p50-ns and p99-ns metrics.
func reportPercentiles(b *testing.B, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	slices.Sort(durs)
	at := func(q float64) float64 { return float64(durs[int(q*float64(len(durs)-1))].Nanoseconds()) }
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
}

// BenchmarkList measures List over 1000 records (read, verify, sort).
func BenchmarkList(b *testing.B) {
	s, _ := newStore(b)
	const n = 1000
	for i := range n {
		if err := s.Put(testRecord(fmt.Sprintf("uid-%04d", i), 0, t0.Add(time.Duration(n-i)*time.Second))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		got, err := s.List()
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != n {
			b.Fatalf("List = %d records, want %d", len(got), n)
		}
	}
}

// BenchmarkDecode measures verifying and parsing one record.
func BenchmarkDecode(b *testing.B) {
	data, err := encode(testRecord("0e760759-7576-4c0b-89d0-bf5c9539026e", 0, t0))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
