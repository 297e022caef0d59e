package main

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	safejobtestutil "github.com/safejob/safejob/test/testutil"
)

// TestAskForRunRetriesConflict asks a parent for a run while the operator
// writes the parent's status between the check and the request: the
// request conflicts, is checked again on the newer parent and lands.
func TestAskForRunRetriesConflict(t *testing.T) {
	for name, tc := range map[string]struct {
		writesBetween int
		wantErr       string
	}{
		"no write between":          {},
		"one status write between":  {writesBetween: 1},
		"a request landing between": {writesBetween: 1, wantErr: "the run yearly-other asked for earlier is not started yet"},
		"writes that never stop":    {writesBetween: 100, wantErr: "kept changing while the run was asked for"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			scheme, err := newScheme()
			if err != nil {
				t.Fatal(err)
			}
			parent := safejobtestutil.MakeSafeJob("yearly", "ns").Schedule("0 0 1 1 *").Obj()
			writes := 0
			cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(parent).WithStatusSubresource(parent).
				WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object,
					patch client.Patch, opts ...client.PatchOption) error {
					if writes < tc.writesBetween {
						writes++
						if err := landBetween(ctx, c, strings.Contains(tc.wantErr, "yearly-other")); err != nil {
							return err
						}
					}
					return c.Patch(ctx, obj, patch, opts...)
				}}).Build()

			_, err = askForRun(ctx, cl, "ns", "yearly", "yearly-by-hand")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("askForRun: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("askForRun: %v", err)
			}
			got := &batchv1alpha1.SafeJob{}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "yearly"}, got); err != nil {
				t.Fatal(err)
			}
			if a := got.Annotations[batchv1alpha1.RunNowAnnotation]; a != "yearly-by-hand" {
				t.Errorf("run-now annotation %q, want yearly-by-hand", a)
			}
		})
	}
}

// landBetween writes the parent as another client would between the
// plugin's read and its request: the operator's status write, or another
// user's run request.
func landBetween(ctx context.Context, c client.Client, request bool) error {
	sj := &batchv1alpha1.SafeJob{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "yearly"}, sj); err != nil {
		return err
	}
	if request {
		sj.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: "yearly-other"}
		return c.Update(ctx, sj)
	}
	sj.Status.Active++
	return c.Status().Update(ctx, sj)
}
