package main

import (
	"fmt"
	"io"
	"time"

	"github.com/cri-guard/cri-guard/internal/admin"
)

// stateStatus is the status's state directory: whether its store is open
// and the records in memory only.
func (g guardParts) stateStatus() admin.State {
	s, u := g.store.State(), g.loop.Unsaved()
	return admin.State{Dir: s.Dir, Available: s.Available, Error: s.Error, Since: s.Since,
		Unsaved: u.Records, LastWriteError: u.LastError, FailingSince: u.Since, NextRetry: u.NextRetry}
}

// printState prints the state directory's lines of the status table.
func printState(w io.Writer, now time.Time, st *admin.State) {
	if st == nil {
		return
	}
	if !st.Available {
		fmt.Fprintf(w, "STATE:\t%s unavailable for %s, records in memory only (opening retried): %s\n",
			st.Dir, now.Sub(st.Since).Round(time.Second), st.Error)
	} else {
		fmt.Fprintf(w, "state:\t%s\n", st.Dir)
	}
	if st.Unsaved > 0 {
		next := ""
		if !st.NextRetry.IsZero() {
			next = fmt.Sprintf(", next attempt in %s", st.NextRetry.Sub(now).Round(time.Second))
		}
		fmt.Fprintf(w, "unsaved:\t%d records not written for %s%s: %s\n",
			st.Unsaved, now.Sub(st.FailingSince).Round(time.Second), next, st.LastWriteError)
	}
}
