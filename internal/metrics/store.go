package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cri-guard/cri-guard/internal/checkpoint"
)

// Operation and result label values of cri_guard_checkpoint_operations_total.
const (
	opPut       = "put"
	opList      = "list"
	opDelete    = "delete"
	resultOK    = "ok"
	resultError = "error"
)

// Store is the checkpoint store as the sync loop uses it (guard.Store).
type Store interface {
	Put(r checkpoint.Record) error
	List() ([]checkpoint.Record, error)
	Delete(key string) error
}

// InstrumentStore wraps s so that every operation is counted by op and
// result. Errors are returned unchanged.
func (m *Metrics) InstrumentStore(s Store) Store {
	return &store{next: s, ops: m.checkpointOps}
}

type store struct {
	next Store
	ops  *prometheus.CounterVec
}

func (s *store) count(op string, err error) {
	r := resultOK
	if err != nil {
		r = resultError
	}
	s.ops.WithLabelValues(op, r).Inc()
}

// Put implements Store.
func (s *store) Put(r checkpoint.Record) error {
	err := s.next.Put(r)
	s.count(opPut, err)
	return err
}

// List implements Store.
func (s *store) List() ([]checkpoint.Record, error) {
	rs, err := s.next.List()
	s.count(opList, err)
	return rs, err
}

// Delete implements Store.
func (s *store) Delete(key string) error {
	err := s.next.Delete(key)
	s.count(opDelete, err)
	return err
}
