package main

// The chart's files that no object of config/default gives: its notes,
// README and the schema of its values. TestChartDocumentsValues keeps the
// README and the schema in step with values.yaml.

// notesTXT is printed by helm install and helm upgrade.
const notesTXT = `SafeJob {{ .Chart.AppVersion }} is installed in namespace {{ .Release.Namespace }}.

Check that the operator runs:

  kubectl -n {{ .Release.Namespace }} rollout status deployment/safejob-controller-manager

Run a first SafeJob and see how it goes:

  kubectl apply -f - <<'YAML'
  apiVersion: batch.safejob.dev/v1alpha1
  kind: SafeJob
  metadata:
    name: hello
  spec:
    completions: 3
    parallelism: 3
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: main
          image: busybox
          command: ["sh", "-c", "echo hello from $HOSTNAME"]
  YAML
  kubectl get safejobs
  kubectl safejob why hello      # the kubectl plugin: why a SafeJob waits

The manager's pods meet the "restricted" Pod Security Standard; to enforce
it on this namespace:

  kubectl label namespace {{ .Release.Namespace }} pod-security.kubernetes.io/enforce=restricted

Helm installs the CRD on the first install only: apply a new release's CRD
(dist/chart/crds/) before helm upgrade. To remove SafeJob, run
"kubectl safejob uninstall" BEFORE "helm uninstall": only a running operator
removes the finalizers it puts on pods.
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElect) }}

WARNING: {{ .Values.replicas }} replicas without leaderElect all reconcile at
once. SafeJob stays exact, but they race for every write: set leaderElect=true.
{{- end }}
`

// chartREADME is the chart's README.md.
const chartREADME = `# SafeJob Helm chart

Installs the SafeJob operator: the ` + "`SafeJob`" + ` CRD (` + "`batch.safejob.dev/v1alpha1`" + `), its
ValidatingAdmissionPolicies, RBAC, and the manager Deployment in the
release's namespace. The chart is generated from ` + "`config/default`" + ` (` + "`make chart`" + `);
its version and ` + "`appVersion`" + ` are the SafeJob release's.

## Install

The chart does not ship an image: build one with ` + "`make image`" + ` (an OCI
layout tarball, ` + "`dist/safejob-image.tar`" + `, built with Go alone; see
` + "`make help`" + `), push it to a registry your cluster pulls from, and name it:

` + "```sh" + `
kubectl create namespace safejob-system
kubectl label namespace safejob-system pod-security.kubernetes.io/enforce=restricted
helm install safejob dist/chart --namespace safejob-system \
  --set image.repository=<your registry>/safejob-controller
` + "```" + `

` + "`image.tag`" + ` defaults to ` + "`v`" + ` and the chart's ` + "`appVersion`" + `.

## Upgrade and uninstall

Helm installs ` + "`crds/`" + ` on the first install only. Before ` + "`helm upgrade`" + `, apply the
new release's CRD: ` + "`kubectl apply --server-side -f dist/chart/crds/`" + `. Before
` + "`helm uninstall`" + `, run ` + "`kubectl safejob uninstall`" + `: the operator must still run
to remove the finalizers it puts on pods, runs and Workloads. See
docs/versioning.md and docs/operations.md in the repository.

## Values

| Value | Default | Meaning |
| --- | --- | --- |
| ` + "`image.repository`" + ` | ` + "`safejob-controller`" + ` | The operator's image, without its tag. |
| ` + "`image.tag`" + ` | ` + "`\"\"`" + ` | The image's tag; empty: ` + "`v`" + ` and the chart's ` + "`appVersion`" + `. |
| ` + "`image.pullPolicy`" + ` | ` + "`IfNotPresent`" + ` | Always, IfNotPresent or Never. |
| ` + "`replicas`" + ` | ` + "`2`" + ` | Manager replicas; with ` + "`leaderElect`" + ` one leads, the others wait to take over. |
| ` + "`leaderElect`" + ` | ` + "`true`" + ` | Run the manager with ` + "`--leader-elect`" + `. |
| ` + "`podDisruptionBudget.enabled`" + ` | ` + "`true`" + ` | A PodDisruptionBudget with ` + "`maxUnavailable: 1`" + `. |
| ` + "`metrics.enabled`" + ` | ` + "`true`" + ` | HTTPS metrics on port 8443 and their Service, for callers bound to the ` + "`safejob-metrics-reader`" + ` ClusterRole. |
| ` + "`resources`" + ` | 100m/128Mi requests, 1/512Mi limits | The manager container's resources. |
| ` + "`extraArgs`" + ` | ` + "`[]`" + ` | More manager flags, e.g. ` + "`--concurrent-reconciles=64`" + `. |
`

// valuesSchema is values.schema.json: helm install, upgrade, template and
// lint refuse values it does not allow, naming the value.
const valuesSchema = `{
  "$schema": "https://json-schema.org/draft-07/schema#",
  "type": "object",
  "additionalProperties": false,
  "required": ["image", "replicas", "leaderElect", "podDisruptionBudget", "metrics", "resources", "extraArgs"],
  "properties": {
    "image": {
      "type": "object",
      "additionalProperties": false,
      "required": ["repository", "tag", "pullPolicy"],
      "properties": {
        "repository": {"type": "string", "minLength": 1, "description": "The operator's image, without its tag."},
        "tag": {"type": "string", "description": "The image's tag; empty: v and the chart's appVersion."},
        "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"]}
      }
    },
    "replicas": {"type": "integer", "minimum": 1, "description": "Manager replicas."},
    "leaderElect": {"type": "boolean"},
    "podDisruptionBudget": {
      "type": "object",
      "additionalProperties": false,
      "properties": {"enabled": {"type": "boolean"}}
    },
    "metrics": {
      "type": "object",
      "additionalProperties": false,
      "properties": {"enabled": {"type": "boolean"}}
    },
    "resources": {"type": "object"},
    "extraArgs": {"type": "array", "items": {"type": "string", "pattern": "^--"}}
  }
}
`
