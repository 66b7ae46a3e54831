package fakenode

import (
	"context"
	"fmt"
	"time"

	"github.com/cri-guard/cri-guard/internal/admin"
	"github.com/cri-guard/cri-guard/tools/cri-guard-bench/internal/benchutil"
)

// WaitSynced waits, at most 3 minutes, until the child cri-guard whose admin
// socket is adminSock has listed the API's pods and adopted that many
// sandboxes.
func WaitSynced(ctx context.Context, adminSock string, sandboxes int) error {
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := admin.Fetch(fctx, adminSock)
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case st.API == nil:
			last = "no API connection"
		case st.API.Synced && len(st.Pods) == sandboxes:
			return nil
		default:
			last = fmt.Sprintf("synced %v, %d pods of %d", st.API.Synced, len(st.Pods), sandboxes)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cri-guard not synced after 3m: %s", last)
		}
		if err := benchutil.SleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}
