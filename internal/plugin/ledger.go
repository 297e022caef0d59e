// Package plugin holds what kubectl safejob shows, as pure functions of the
// objects it reads: a SafeJob's ledger, why it does not progress, and Job
// manifests converted to SafeJobs; and, through a client, the two commands
// that change a cluster: release, which frees what SafeJob's finalizers
// hold once its operator is gone, and uninstall.
package plugin

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// LedgerView is a SafeJob's ledger as `kubectl safejob ledger -o json`
// prints it; its fields are stable.
type LedgerView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Seq is the seq of the last entry ever appended.
	Seq int64 `json:"seq"`
	// Folded is what the checkpoint holds, nil when nothing is folded.
	Folded *Folded `json:"folded,omitempty"`
	// Totals is what the whole ledger (checkpoint and entries) says; nil
	// for a scheduled SafeJob, whose ledger lists runs.
	Totals *Totals `json:"totals,omitempty"`
	// Entries are the listed entries, oldest first.
	Entries []Entry `json:"entries"`
}

// Folded summarizes the checkpoint: entries up to Seq are folded into it.
type Folded struct {
	Seq int64 `json:"seq"`
}

// Totals are the ledger's counts.
type Totals struct {
	Succeeded        int    `json:"succeeded"`
	Failed           int32  `json:"failed"`
	Lost             int32  `json:"lost"`
	Evicted          int32  `json:"evicted"`
	Ignored          int32  `json:"ignored"`
	CompletedIndexes string `json:"completedIndexes,omitempty"`
	FailedIndexes    string `json:"failedIndexes,omitempty"`
	// Attempts is the number of pods launched, folded ones included.
	Attempts int64 `json:"attempts"`
	// Open is the number of launches whose outcome is not recorded.
	Open int `json:"open"`
}

// Entry is one listed ledger entry.
type Entry struct {
	Seq           int64      `json:"seq"`
	Time          time.Time  `json:"time"`
	Type          string     `json:"type"`
	Index         int32      `json:"index"`
	Attempt       int32      `json:"attempt"`
	Pod           string     `json:"pod,omitempty"`
	Run           string     `json:"run,omitempty"`
	ScheduledTime *time.Time `json:"scheduledTime,omitempty"`
	Reason        string     `json:"reason,omitempty"`
}

// Ledger builds the view of a SafeJob's ledger.
func Ledger(sj *batchv1alpha1.SafeJob) (*LedgerView, error) {
	l := &sj.Status.Ledger
	v := &LedgerView{Namespace: sj.Namespace, Name: sj.Name, Seq: l.Seq, Entries: []Entry{}}
	if l.Checkpoint != nil {
		v.Folded = &Folded{Seq: l.Checkpoint.Seq}
	}
	entries := l.Entries
	if sj.Spec.Schedule == nil {
		// One row per pod, also where the ledger lists a write's launches, or stops, as one entry.
		var err error
		if entries, err = jobs.Unpack(l); err != nil {
			return nil, fmt.Errorf("the ledger of %s/%s does not read: %w", sj.Namespace, sj.Name, err)
		}
	}
	for _, e := range entries {
		out := Entry{Seq: e.Seq, Time: e.Time.UTC(), Type: string(e.Type), Index: e.Index, Attempt: e.Attempt, Pod: e.Pod,
			Run: e.Run, Reason: e.Reason}
		if e.ScheduledTime != nil {
			t := e.ScheduledTime.UTC()
			out.ScheduledTime = &t
		}
		v.Entries = append(v.Entries, out)
	}
	if sj.Spec.Schedule != nil {
		return v, nil
	}
	st, err := jobs.Replay(l)
	if err != nil {
		return nil, fmt.Errorf("the ledger of %s/%s does not read: %w", sj.Namespace, sj.Name, err)
	}
	t := &Totals{Succeeded: st.Succeeded.Len(), Failed: st.Failed, Lost: st.Lost, Evicted: st.Evicted, Ignored: st.Ignored,
		Open: len(st.Open)}
	if sj.Spec.CompletionMode == batchv1alpha1.IndexedCompletion {
		t.CompletedIndexes = st.Succeeded.String()
	}
	if sj.Spec.BackoffLimitPerIndex != nil {
		t.FailedIndexes = st.FailedIndexes.String()
	}
	t.Attempts = st.Launched()
	v.Totals = t
	return v, nil
}

// TableOptions are how a command's table is written: Wide adds the columns
// kept for -o wide, NoHeaders leaves out the header and summary lines.
type TableOptions struct {
	Wide, NoHeaders bool
}

// PrintLedger writes the view as a summary and a table of the entries; wide,
// with each entry's scheduled time (of a run).
func PrintLedger(w io.Writer, v *LedgerView, o TableOptions) error {
	if !o.NoHeaders {
		if err := PrintLedgerSummary(w, v); err != nil {
			return err
		}
	}
	header := "SEQ\tTIME\tTYPE\tINDEX\tATTEMPT\tPOD/RUN\tREASON"
	if o.Wide {
		header += "\tSCHEDULED"
	}
	return writeTable(w, o, header, func(row func(string, ...any)) {
		for _, e := range v.Entries {
			who := e.Pod
			if e.Run != "" {
				who = e.Run
			}
			if !o.Wide {
				row("%d\t%s\t%s\t%d\t%d\t%s\t%s", e.Seq, e.Time.Format(time.RFC3339), e.Type, e.Index, e.Attempt, who, e.Reason)
				continue
			}
			scheduled := ""
			if e.ScheduledTime != nil {
				scheduled = e.ScheduledTime.Format(time.RFC3339)
			}
			row("%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s", e.Seq, e.Time.Format(time.RFC3339), e.Type, e.Index, e.Attempt, who, e.Reason, scheduled)
		}
	})
}

// PrintLedgerSummary writes the view's seq, checkpoint and totals.
func PrintLedgerSummary(w io.Writer, v *LedgerView) error {
	out := &errWriter{w: w}
	out.printf("SafeJob %s/%s, ledger seq %d", v.Namespace, v.Name, v.Seq)
	if v.Folded != nil {
		out.printf(", entries up to seq %d folded into the checkpoint", v.Folded.Seq)
	}
	out.printf("\n")
	if t := v.Totals; t != nil {
		out.printf("Totals: %d succeeded, %d failed, %d lost, %d evicted, %d ignored; %d pods launched, %d open\n",
			t.Succeeded, t.Failed, t.Lost, t.Evicted, t.Ignored, t.Attempts, t.Open)
		if t.CompletedIndexes != "" {
			out.printf("Completed indexes: %s\n", t.CompletedIndexes)
		}
		if t.FailedIndexes != "" {
			out.printf("Failed indexes: %s\n", t.FailedIndexes)
		}
	}
	return out.err
}

// writeTable writes a tab-separated header (unless o.NoHeaders) and the rows
// rows writes, in aligned columns.
func writeTable(w io.Writer, o TableOptions, header string, rows func(row func(format string, args ...any))) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table := &errWriter{w: tw}
	if !o.NoHeaders {
		table.printf("%s\n", header)
	}
	rows(func(format string, args ...any) { table.printf(format+"\n", args...) })
	if err := tw.Flush(); err != nil && table.err == nil {
		table.err = fmt.Errorf("writing the table: %w", err)
	}
	return table.err
}

// errWriter writes until the first error, and keeps it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		if _, err := fmt.Fprintf(e.w, format, args...); err != nil {
			e.err = fmt.Errorf("writing: %w", err)
		}
	}
}

// Write lets an errWriter sit under a tabwriter.
func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err != nil {
		e.err = fmt.Errorf("writing: %w", err)
	}
	return n, e.err
}

// NewEntries returns the entries of v after seq after, and whether entries
// after it were folded into the checkpoint before they could be shown.
func NewEntries(v *LedgerView, after int64) ([]Entry, bool) {
	var out []Entry
	for _, e := range v.Entries {
		if e.Seq > after {
			out = append(out, e)
		}
	}
	return out, v.Folded != nil && v.Folded.Seq > after
}

// watchRow is the fixed-width row of `ledger --watch`: rows printed at
// different times line up with the header.
const watchRow = "%-6v %-20v %-10v %-5v %-7v %-40v %v\n"

// PrintWatchHeader writes the header of `ledger --watch`.
func PrintWatchHeader(w io.Writer) error {
	_, err := fmt.Fprintf(w, watchRow, "SEQ", "TIME", "TYPE", "INDEX", "ATTEMPT", "POD/RUN", "REASON")
	return err //nolint:wrapcheck // a failed write to stdout says enough
}

// PrintWatchRows writes entries as `ledger --watch` rows; folded says
// entries were folded into the checkpoint before they were shown.
func PrintWatchRows(w io.Writer, entries []Entry, folded bool, foldedSeq int64) error {
	out := &errWriter{w: w}
	if folded {
		out.printf("(entries up to seq %d were folded into the checkpoint before they were shown)\n", foldedSeq)
	}
	for _, e := range entries {
		who := e.Pod
		if e.Run != "" {
			who = e.Run
		}
		out.printf(watchRow, e.Seq, e.Time.Format(time.RFC3339), e.Type, e.Index, e.Attempt, who, e.Reason)
	}
	return out.err
}
