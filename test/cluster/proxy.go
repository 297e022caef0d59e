package cluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// Proxy is a loopback TCP proxy that delays every chunk of traffic by a
// jittered delay (order kept) and cuts random connections, so clients behind
// it see slow watches, dropped streams and relists.
type Proxy struct {
	// Addr is where the proxy listens.
	Addr string

	target   string
	minDelay time.Duration
	maxDelay time.Duration
	ln       net.Listener
	mu       sync.Mutex
	conns    map[net.Conn]bool
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// ProxyFault is what a proxy does to the connections through it
// (StartProxy).
type ProxyFault struct {
	MinDelay, MaxDelay, CutEvery time.Duration
}

// ProxiedKubeconfig writes to dst the kubeconfig src with each cluster's
// server replaced by a proxy in front of it that does what f says; the
// caller closes the proxies, those started before an error too.
func ProxiedKubeconfig(src, dst string, f ProxyFault) ([]*Proxy, error) {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", src, err)
	}
	var proxies []*Proxy
	for _, kc := range cfg.Clusters {
		p, err := StartProxy(strings.TrimPrefix(kc.Server, "https://"), f.MinDelay, f.MaxDelay, f.CutEvery)
		if err != nil {
			return proxies, err
		}
		proxies = append(proxies, p)
		kc.Server = "https://" + p.Addr
	}
	if err := clientcmd.WriteToFile(*cfg, dst); err != nil {
		return proxies, fmt.Errorf("writing kubeconfig %s: %w", dst, err)
	}
	return proxies, nil
}

// StartProxy forwards 127.0.0.1:<free port> to target, each chunk delayed by
// a random duration in [minDelay, maxDelay]; at random times, on average
// every cutEvery (if > 0), one random open connection is closed.
func StartProxy(target string, minDelay, maxDelay, cutEvery time.Duration) (*Proxy, error) {
	return StartProxyAt("127.0.0.1:0", target, minDelay, maxDelay, cutEvery)
}

// StartProxyAt is StartProxy listening at addr: a client configured for
// addr before anything listened there reaches target once it does.
func StartProxyAt(addr, target string, minDelay, maxDelay, cutEvery time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening at %s: %w", addr, err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, minDelay: minDelay, maxDelay: maxDelay, ln: ln,
		conns: map[net.Conn]bool{}, stop: make(chan struct{})}
	p.wg.Go(p.accept)
	if cutEvery > 0 {
		p.wg.Go(func() { p.cut(cutEvery) })
	}
	return p, nil
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.track(in, out)
		p.wg.Go(func() { p.pipe(in, out) })
		p.wg.Go(func() { p.pipe(out, in) })
	}
}

func (p *Proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = true
	}
}

// pipe copies src to dst, holding each chunk back by a random delay; chunks
// leave in the order they came.
func (p *Proxy) pipe(src, dst net.Conn) {
	type chunk struct {
		data []byte
		due  time.Time
	}
	ch := make(chan chunk, 4096)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				d := p.minDelay + time.Duration(rand.Int64N(int64(p.maxDelay-p.minDelay)+1))
				ch <- chunk{data: buf[:n], due: time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.due)) // the simulated link delay itself
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	p.close(src, dst)
	for range ch { //nolint:revive // drain so the reader can exit
	}
}

func (p *Proxy) close(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// cut closes one random open connection at random times, on average every
// every: the gaps are exponentially distributed, as independent faults
// arrive. A cut at a fixed period would fall in step with any client timer
// of the same period (a lost create is retried as a new attempt a fixed
// grace after the first), and would then hit every retry.
func (p *Proxy) cut(every time.Duration) {
	for {
		t := time.NewTimer(time.Duration(rand.ExpFloat64() * float64(every)))
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-t.C:
		}
		p.mu.Lock()
		for c := range p.conns {
			_ = c.Close() // the pipes notice and close the peer
			break
		}
		p.mu.Unlock()
	}
}

// Close stops the proxy and every connection through it; closing it again
// does nothing.
func (p *Proxy) Close() {
	p.stopOnce.Do(p.closeOnce)
}

func (p *Proxy) closeOnce() {
	close(p.stop)
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
