package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

// runVariant starts an API server with the CRD and measures a Job's status
// write and a SafeJob's at each ledger length, in rounds that take each
// object in turn, so that what else the machine does falls on all of them;
// it prints the median of the rounds.
func runVariant(name string, crd *apiextensionsv1.CustomResourceDefinition, vc config) error {
	env, cfg, err := testutil.StartControlPlane(func() *envtest.Environment {
		return &envtest.Environment{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}}
	})
	if err != nil {
		return fmt.Errorf("starting a control plane for %s: %w", name, err)
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = -1, 0
	c, err := newClient(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	objects, err := createObjects(ctx, c, vc.lengths, vc.untracked, vc.patch)
	if err != nil {
		return err
	}
	releases, creations := releaseKinds(), creationKinds()
	if vc.releases == 0 {
		releases = nil
	}
	if vc.creates == 0 {
		creations = nil
	}
	if err := measureRounds(ctx, cfg, c, vc, objects, releases, creations); err != nil {
		return err
	}
	jobMs := median(objects[0].api)
	for _, o := range objects {
		raw, err := json.Marshal(o.obj)
		if err != nil {
			return fmt.Errorf("%s: encoding: %w", o.label, err)
		}
		printRow(name, o.label, len(raw), o.api, o.etcd, jobMs)
	}
	for _, rk := range releases {
		printRow(name, rk.label, rk.bytes, rk.api, rk.etcd, jobMs)
	}
	for _, ck := range creations {
		printRow(name, ck.label, ck.bytes, ck.api, ck.etcd, jobMs)
	}
	return nil
}

// measureRounds measures every release kind, creation kind and object in
// turn, vc.rounds times; the last round's last object is profiled if vc
// asks for it.
func measureRounds(ctx context.Context, cfg *rest.Config, c client.Client, vc config, objects []measured, releases []release,
	creations []creation) error {
	ps, err := findPIDs()
	if err != nil {
		return err
	}
	for r := range vc.rounds {
		for k := range releases {
			if err := releases[k].measure(ctx, c, ps, vc.releases, r); err != nil {
				return err
			}
		}
		for k := range creations {
			if err := creations[k].measure(ctx, c, ps, vc.creates, r); err != nil {
				return err
			}
		}
		for k := range objects {
			if vc.profile != "" && r == vc.rounds-1 && k == len(objects)-1 {
				done, err := startProfile(ctx, cfg, vc.profile)
				if err != nil {
					return err
				}
				defer func() { <-done }()
			}
			if err := objects[k].measure(ctx, c, ps, vc.writes); err != nil {
				return err
			}
		}
	}
	return nil
}

// printRow prints one measured object's median CPU per write, its range,
// and its ratio to the Job's status write.
func printRow(variant, label string, bytes int, api, etcd []float64, jobMs float64) {
	m := median(api)
	fmt.Printf("%-20s %-32s %10d %8.2f (%.2f-%.2f) %10.2f %8.2f\n", variant, label, bytes, m,
		slices.Min(api), slices.Max(api), median(etcd), m/jobMs)
}

// samples are what an operation cost kube-apiserver and etcd, in CPU ms
// per operation, one sample per round.
type samples struct{ api, etcd []float64 }

// sample runs do, which makes n operations, and records their cost.
func (s *samples) sample(pids pids, n int, do func() error) error {
	api0, etcd0 := cluster.CPUSeconds(pids.apiserver), cluster.CPUSeconds(pids.etcd)
	if err := do(); err != nil {
		return err
	}
	api1, etcd1 := cluster.CPUSeconds(pids.apiserver), cluster.CPUSeconds(pids.etcd)
	s.api = append(s.api, 1000*(api1-api0)/float64(n))
	s.etcd = append(s.etcd, 1000*(etcd1-etcd0)/float64(n))
	return nil
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
