package logging

import (
	"bytes"
	"errors"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// zapLogger writes JSON lines to buf with the caller and no time, as the
// operator's production logger does with a time.
func zapLogger(buf *bytes.Buffer) logr.Logger {
	cfg := zap.NewProductionEncoderConfig()
	cfg.TimeKey = ""
	core := zapcore.NewCore(zapcore.NewJSONEncoder(cfg), zapcore.AddSync(buf), zapcore.DebugLevel)
	return zapr.NewLogger(zap.New(core, zap.AddCaller()))
}

// script logs as controller-runtime and the reconciler do.
func script(l logr.Logger) {
	l = l.WithName("safejob").WithValues("controller", "safejob")
	r := l.WithValues("SafeJob", klog.KRef("ns", "a"), "namespace", "ns", "name", "a").WithValues("reconcileID", "id-1")
	r.Info("reconciled", "pods", 2)
	r.V(1).Info("detail")
	r.V(5).Info("never written")
	r.Error(errors.New("boom"), "status write failed", "seq", 7)
	r.WithName("window").WithValues("room", 3).Info("named")
	r.WithValues("dangling").WithValues("after", 4).Info("odd", "k", 5)
	helper(r)
}

func helper(l logr.Logger) {
	l.WithCallDepth(1).Info("from a helper")
}

// TestLazyWritesTheSameLines checks that a lazy logger writes what the
// eager one writes: the same values in the same order, names, levels,
// errors and callers.
func TestLazyWritesTheSameLines(t *testing.T) {
	var eager, lazy bytes.Buffer
	script(zapLogger(&eager))
	script(Lazy(zapLogger(&lazy)))
	if eager.Len() == 0 {
		t.Fatal("the eager logger wrote nothing")
	}
	if diff := cmp.Diff(eager.String(), lazy.String()); diff != "" {
		t.Errorf("lines (-eager,+lazy):\n%s", diff)
	}
}

// counting is a sink that counts the values handed to it.
type counting struct {
	withValues int
	lines      [][]any
}

func (c *counting) Init(logr.RuntimeInfo)           {}
func (c *counting) Enabled(int) bool                { return true }
func (c *counting) Info(_ int, _ string, kv ...any) { c.lines = append(c.lines, kv) }
func (c *counting) Error(_ error, _ string, kv ...any) {
	c.lines = append(c.lines, kv)
}
func (c *counting) WithValues(...any) logr.LogSink { c.withValues++; return c }
func (c *counting) WithName(string) logr.LogSink   { return c }

// TestLazyDefersValues checks that values reach the sink only with a line,
// and that loggers made from one another do not share them.
func TestLazyDefersValues(t *testing.T) {
	c := &counting{}
	base := Lazy(logr.New(c)).WithValues("controller", "safejob")
	a := base.WithValues("name", "a")
	b := base.WithValues("name", "b")
	if c.withValues != 0 {
		t.Fatalf("%d WithValues reached the sink before any line", c.withValues)
	}
	a.Info("m", "k", 1)
	b.Info("m")
	want := [][]any{{"controller", "safejob", "name", "a", "k", 1}, {"controller", "safejob", "name", "b"}}
	if diff := cmp.Diff(want, c.lines); diff != "" {
		t.Errorf("values written (-want,+got):\n%s", diff)
	}
}
