package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The leader election timings of kube-controller-manager.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// LeaderConfig is the Lease the replicas elect their leader on.
type LeaderConfig struct {
	Namespace, Name string
	// Identity is this replica's holder identity (hostname and a random
	// suffix: a restarted pod is a new candidate).
	Identity string
	// LeaseDuration, RenewDeadline, RetryPeriod: zero takes the defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// RunElected runs c while this replica holds the Lease, and campaigns
// again whenever it loses it, until ctx ends; on a clean stop the Lease is
// released so that another replica takes over at once. healthz (may be
// nil) is told of each elector, for /healthz.
func (c *Controller) RunElected(ctx context.Context, client kubernetes.Interface, lc LeaderConfig, healthz *leaderelection.HealthzAdaptor) error {
	if lc.Namespace == "" || lc.Name == "" || lc.Identity == "" {
		return errors.New("leader election: a lease namespace, name and identity are required")
	}
	if lc.LeaseDuration == 0 {
		lc.LeaseDuration = DefaultLeaseDuration
	}
	if lc.RenewDeadline == 0 {
		lc.RenewDeadline = DefaultRenewDeadline
	}
	if lc.RetryPeriod == 0 {
		lc.RetryPeriod = DefaultRetryPeriod
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: lc.Namespace, Name: lc.Name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: lc.Identity},
	}
	log := c.log.WithField("lease", lc.Namespace+"/"+lc.Name).WithField("identity", lc.Identity)
	for ctx.Err() == nil {
		term := make(chan struct{})
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   lc.LeaseDuration,
			RenewDeadline:   lc.RenewDeadline,
			RetryPeriod:     lc.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            lc.Name,
			WatchDog:        healthz,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					defer close(term)
					c.metrics.leader.Set(1)
					defer c.metrics.leader.Set(0)
					log.Info("leading: reconciling node taints")
					if err := c.run(ctx); err != nil && ctx.Err() == nil {
						log.WithError(err).Error("node taint controller stopped")
					}
				},
				OnStoppedLeading: func() {},
				OnNewLeader: func(id string) {
					if id != lc.Identity {
						log.WithField("leader", id).Info("following")
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx)
		if ctx.Err() != nil {
			// a stop: the term, if it began, ends with ctx (its workers
			// check it before each write, their requests carry it)
			return nil
		}
		// le.Run gives up only with ctx or once leading ended: wait until
		// no worker writes before campaigning again
		<-term
		log.Warn("leadership lost, campaigning again")
	}
	return nil
}
