package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestRetryStartup: a start that fails at first (a connection cut while
// discovering the API) is retried until it succeeds; one that keeps failing
// returns its own error once the steps run out; a cancelled context stops
// the retries.
func TestRetryStartup(t *testing.T) {
	b := wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 4}
	calls := 0
	err := retryStartup(context.Background(), b, func() error {
		calls++
		if calls < 3 {
			return errors.New("unexpected EOF")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("retried start: %v after %d calls, want success on the third", err, calls)
	}
	refused := errors.New("connection refused")
	calls = 0
	err = retryStartup(context.Background(), b, func() error { calls++; return refused })
	if !errors.Is(err, refused) || calls != 4 {
		t.Errorf("failing start: %v after %d calls, want its own error after 4", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	if err := retryStartup(ctx, wait.Backoff{Duration: time.Hour, Steps: 4}, func() error { calls++; return refused }); err == nil {
		t.Errorf("cancelled: nil error after %d calls", calls)
	}
}
