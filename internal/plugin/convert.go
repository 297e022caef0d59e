package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/batchjob"
)

// Convert turns the batch/v1 Jobs and CronJobs of a YAML or JSON stream
// (one or many documents) into SafeJobs. A field a SafeJob does not have
// is an error naming it and its document, never dropped.
func Convert(in io.Reader) ([]*batchv1alpha1.SafeJob, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var out []*batchv1alpha1.SafeJob
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
			continue
		}
		var head metav1.TypeMeta
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		var sj *batchv1alpha1.SafeJob
		var err error
		switch {
		case head.APIVersion == "batch/v1" && head.Kind == "Job":
			sj, err = convertJob(raw)
		case head.APIVersion == "batch/v1" && head.Kind == "CronJob":
			sj, err = convertCronJob(raw)
		default:
			err = fmt.Errorf("%s %s is not a batch/v1 Job or CronJob", head.APIVersion, head.Kind)
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		out = append(out, sj)
	}
}

func newSafeJob(meta *metav1.ObjectMeta) *batchv1alpha1.SafeJob {
	return &batchv1alpha1.SafeJob{
		TypeMeta: metav1.TypeMeta{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob"},
		ObjectMeta: metav1.ObjectMeta{Name: meta.Name, GenerateName: meta.GenerateName, Namespace: meta.Namespace,
			Labels: meta.Labels, Annotations: meta.Annotations},
	}
}

func convertJob(raw []byte) (*batchv1alpha1.SafeJob, error) {
	var job batchv1.Job
	if err := strictUnmarshal(raw, &job); err != nil {
		return nil, fmt.Errorf("reading the Job: %w", err)
	}
	sj := newSafeJob(&job.ObjectMeta)
	if err := batchjob.ConvertSpec(job.Spec, &sj.Spec, "spec"); err != nil {
		return nil, fmt.Errorf("the Job %s: %w", job.Name, err)
	}
	return sj, nil
}

func convertCronJob(raw []byte) (*batchv1alpha1.SafeJob, error) {
	var cj batchv1.CronJob
	if err := strictUnmarshal(raw, &cj); err != nil {
		return nil, fmt.Errorf("reading the CronJob: %w", err)
	}
	sj := newSafeJob(&cj.ObjectMeta)
	if err := batchjob.ConvertSpec(cj.Spec.JobTemplate.Spec, &sj.Spec, "spec.jobTemplate.spec"); err != nil {
		return nil, fmt.Errorf("the CronJob %s: %w", cj.Name, err)
	}
	// A run carries its parent's labels: the job template's go there, and
	// its annotations too.
	tm := cj.Spec.JobTemplate.ObjectMeta
	if len(tm.Labels) > 0 {
		if sj.Labels == nil {
			sj.Labels = map[string]string{}
		}
		maps.Copy(sj.Labels, tm.Labels)
	}
	if len(tm.Annotations) > 0 {
		if sj.Annotations == nil {
			sj.Annotations = map[string]string{}
		}
		maps.Copy(sj.Annotations, tm.Annotations)
	}
	s := &cj.Spec
	sj.Spec.Schedule, sj.Spec.TimeZone = &s.Schedule, s.TimeZone
	sj.Spec.ConcurrencyPolicy = batchv1alpha1.ConcurrencyPolicy(s.ConcurrencyPolicy)
	sj.Spec.StartingDeadlineSeconds, sj.Spec.Suspend = s.StartingDeadlineSeconds, s.Suspend
	sj.Spec.SuccessfulRunsHistoryLimit, sj.Spec.FailedRunsHistoryLimit = s.SuccessfulJobsHistoryLimit, s.FailedJobsHistoryLimit
	return sj, nil
}

// strictUnmarshal decodes JSON, refusing fields the type has not (a
// misspelt field is an error, not a field dropped).
func strictUnmarshal(raw []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	return nil
}
