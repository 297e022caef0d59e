package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// client returns a client and the namespace the flags name.
func (o *options) client() (client.Client, string, error) {
	cfg, err := o.kubeFlags.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ns, _, err := o.kubeFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace: %w", err)
	}
	scheme, err := newScheme()
	if err != nil {
		return nil, "", err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("creating a client: %w", err)
	}
	return cl, ns, nil
}

// newScheme holds the types the commands read: SafeJobs, and for release
// and uninstall the built-in types, Workloads and CRDs.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{batchv1alpha1.AddToScheme, clientgoscheme.AddToScheme,
		kueue.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("adding the types: %w", err)
		}
	}
	return scheme, nil
}

// target reads what NAME names for ledger and why: a SafeJob, or with
// job/NAME a batch/v1 Job managed by SafeJob and its ledger (nil while it
// has none; job is nil for a SafeJob).
func (o *options) target(ctx context.Context, arg string) (sj *batchv1alpha1.SafeJob, job *batchv1.Job, err error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok {
		sj, err := o.get(ctx, arg)
		return sj, nil, err
	}
	switch kind {
	case "safejob", "safejobs", "sj", "safejob.batch.safejob.dev":
		sj, err := o.get(ctx, name)
		return sj, nil, err
	case "job", "jobs", "job.batch":
	default:
		return nil, nil, fmt.Errorf("%s: name a SafeJob (NAME or safejob/NAME) or a Job SafeJob manages (job/NAME)", arg)
	}
	cl, ns, err := o.client()
	if err != nil {
		return nil, nil, err
	}
	job = &batchv1.Job{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job); err != nil {
		return nil, nil, fmt.Errorf("getting Job %s/%s: %w", ns, name, err)
	}
	if !batchv1alpha1.ManagesJob(job) {
		return nil, nil, fmt.Errorf("the Job %s/%s is not managed by SafeJob: its spec.managedBy is %q, not %s", ns, name,
			ptr.Deref(job.Spec.ManagedBy, batchv1.JobControllerName), batchv1alpha1.ControllerName)
	}
	jobLedger := &batchv1alpha1.SafeJob{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, jobLedger); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, job, nil
		}
		return nil, nil, fmt.Errorf("getting the ledger of Job %s/%s: %w", ns, name, err)
	}
	if ref := batchv1alpha1.ManagedJobOf(jobLedger); ref == nil || ref.UID != job.UID {
		return nil, job, nil // a SafeJob of the name that is not the Job's ledger: why says so
	}
	return jobLedger, job, nil
}

// get reads a SafeJob of the flags' namespace.
func (o *options) get(ctx context.Context, name string) (*batchv1alpha1.SafeJob, error) {
	cl, ns, err := o.client()
	if err != nil {
		return nil, err
	}
	sj := &batchv1alpha1.SafeJob{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sj); err != nil {
		return nil, fmt.Errorf("getting SafeJob %s/%s: %w", ns, name, err)
	}
	return sj, nil
}

// listRuns lists the runs of a scheduled SafeJob of namespace ns: the
// SafeJobs that carry its parent label.
func listRuns(ctx context.Context, cl client.Client, ns string, parent *batchv1alpha1.SafeJob) ([]batchv1alpha1.SafeJob, error) {
	var children batchv1alpha1.SafeJobList
	if err := cl.List(ctx, &children, client.InNamespace(ns),
		client.MatchingLabels{batchv1alpha1.ParentLabel: ledger.ShortName(parent.Name, 63)}); err != nil {
		return nil, fmt.Errorf("listing the runs of %s: %w", parent.Name, err)
	}
	return children.Items, nil
}

// completeNames completes the name of a SafeJob of the namespace.
func (o *options) completeNames(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cl, ns, err := o.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var list batchv1alpha1.SafeJobList
	if err := cl.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []cobra.Completion
	for _, sj := range list.Items {
		names = append(names, sj.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
