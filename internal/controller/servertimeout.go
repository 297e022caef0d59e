package controller

import (
	"context"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// serverDeadlineKey marks a context whose requests carry their deadline to
// the API server (withServerDeadline).
type serverDeadlineKey struct{}

// withServerDeadline returns ctx, with the deadline d, marked so that the
// requests made under it tell the API server their time left as the
// request's timeout parameter (WithServerTimeouts): the API server then
// gives up on them itself when the deadline passes, where a client's
// deadline alone ends only the client's wait. A proxy or load balancer
// that does not pass a client's going away on to the API server, an
// admission webhook that answers late, or a request waiting in the API
// server's own queues can otherwise store a create after its launch was
// recorded Lost (the create fence, ledger.Fence).
func withServerDeadline(ctx context.Context, d time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.WithValue(ctx, serverDeadlineKey{}, true), d)
}

// WithServerTimeouts wraps cfg's transport so that the requests made under
// withServerDeadline carry their time left as the timeout parameter. The
// operator's config and every test's that runs the reconciler are wrapped.
func WithServerTimeouts(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return serverTimeout{next: rt} })
}

// serverTimeout sets the timeout parameter of marked requests.
type serverTimeout struct{ next http.RoundTripper }

func (s serverTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	deadline, ok := ctx.Deadline()
	if !ok || ctx.Value(serverDeadlineKey{}) == nil {
		return s.next.RoundTrip(req) //nolint:wrapcheck // a transport's own error, as the next one returned it
	}
	left := time.Until(deadline).Truncate(time.Millisecond)
	if left <= 0 {
		return nil, context.DeadlineExceeded
	}
	req = req.Clone(ctx)
	q := req.URL.Query()
	q.Set("timeout", left.String())
	req.URL.RawQuery = q.Encode()
	return s.next.RoundTrip(req) //nolint:wrapcheck // a transport's own error, as the next one returned it
}
