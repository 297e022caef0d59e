package testutil

import (
	"io"
	"net/http"
	"strings"
	"time"
)

// DelayWatch returns a transport wrapper that holds back every byte of the
// watch streams whose URL path contains resource by delay, keeping their
// order: the informer sees those objects late, as over a slow link, while
// other streams (and every request) go at full speed.
func DelayWatch(resource string, delay time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || req.URL.Query().Get("watch") != "true" || !strings.Contains(req.URL.Path, resource) {
				return resp, err
			}
			resp.Body = newDelayedBody(resp.Body, delay)
			return resp, nil
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type chunk struct {
	data []byte
	at   time.Time
	err  error
}

type delayedBody struct {
	src   io.ReadCloser
	delay time.Duration
	ch    chan chunk
	cur   []byte
	err   error
}

func newDelayedBody(src io.ReadCloser, delay time.Duration) *delayedBody {
	b := &delayedBody{src: src, delay: delay, ch: make(chan chunk, 1024)}
	go func() {
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			b.ch <- chunk{data: buf[:n], at: time.Now(), err: err}
			if err != nil {
				close(b.ch)
				return
			}
		}
	}()
	return b
}

func (b *delayedBody) Read(p []byte) (int, error) {
	for len(b.cur) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		c, ok := <-b.ch
		if !ok {
			return 0, io.EOF
		}
		if wait := time.Until(c.at.Add(b.delay)); wait > 0 {
			time.Sleep(wait) // the simulated link delay itself
		}
		b.cur, b.err = c.data, c.err
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

func (b *delayedBody) Close() error { return b.src.Close() }
