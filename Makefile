# SafeJob Makefile. Every tool is pinned and built from the Go module proxy
# into a cache outside the repository, so fresh clones reuse it.

IMG ?= safejob-controller:latest
GOARCH ?= $(shell go env GOARCH)
CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/safejob
TOOLS ?= $(CACHE)/tools
K8S_VERSION ?= v1.37.2
export K8S_VERSION

CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
CRD_REF_DOCS_VERSION ?= v0.3.0
# Prometheus v3.16.0: its Go module is versioned v0.316.0.
PROMETHEUS_VERSION ?= v0.316.0
CONTROLLER_GEN ?= $(TOOLS)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT ?= $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)
CRD_REF_DOCS ?= $(TOOLS)/crd-ref-docs-$(CRD_REF_DOCS_VERSION)
PROMTOOL ?= $(TOOLS)/promtool-$(PROMETHEUS_VERSION)
KUBECTL ?= $(CACHE)/k8s-$(K8S_VERSION)/kubectl
# The admission policies that ship with the CRD (config/policy, without its kustomization).
POLICIES = $(wildcard config/policy/*-*.yaml)

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD and RBAC manifests.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:generateEmbeddedObjectMeta=true paths="./..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run

.PHONY: chart
chart: manifests kubectl ## Generate the Helm chart dist/chart from config/default and config/prometheus.
	{ $(KUBECTL) kustomize config/default; echo ---; $(KUBECTL) kustomize config/prometheus; } | go run ./hack/chart -out dist/chart

.PHONY: api-docs
api-docs: crd-ref-docs ## Generate the API reference docs/reference/api.md from the Go types.
	$(CRD_REF_DOCS) --source-path=./api --config=hack/api-docs/config.yaml --renderer=markdown \
		--output-path=docs/reference/api.md --log-level=ERROR

.PHONY: verify
verify: manifests generate fmt chart api-docs ## Regenerate everything and fail if the tree changed.
	@git diff --exit-code --stat -- . || { echo "Generated files are out of date: run 'make manifests generate fmt chart api-docs' and commit."; exit 1; }

.PHONY: envtest-assets
envtest-assets: ## Build etcd and kube-apiserver (pinned, cached) for the integration tests.
	@hack/k8s-binaries.sh etcd kube-apiserver >/dev/null

.PHONY: cluster-assets
cluster-assets: envtest-assets ## Build the rest of the local cluster and tools (pinned, cached): scheduler, controller-manager, kubectl, KWOK, Kueue, helm, krew.
	@hack/k8s-binaries.sh kube-scheduler kube-controller-manager kubectl >/dev/null
	@hack/kwok.sh >/dev/null
	@hack/kueue.sh >/dev/null
	@hack/helm.sh >/dev/null
	@hack/krew.sh >/dev/null

# In CI (CI=true, as .ci/run sets it) the tests also check that every
# generated file is committed as generated (make verify). The integration
# and end-to-end tests spend most of their time waiting on their clusters,
# so more of them run at once than there are cores (TEST_PARALLEL).
TEST_PARALLEL ?= 4
.PHONY: test
test: manifests generate fmt vet cluster-assets test-rules $(if $(filter true,$(CI)),verify) ## Run unit, integration (real API server) and end-to-end (local cluster) tests.
	KUBEBUILDER_ASSETS="$$(hack/k8s-binaries.sh etcd kube-apiserver)" go test ./... -count=1 -parallel $(TEST_PARALLEL) -timeout 40m

# The older releases SafeJob supports; `make test` runs the newest.
COMPAT_K8S_VERSIONS ?= v1.35.4 v1.36.5
CRONJOB_OUT ?= cronjob-outage.md
COMPAT_KUEUE_VERSIONS ?= v0.16.6

# The fault tests with every pacing decision off (controller.Pacing{}, the
# operator's --pacing=false): the integration suite, and the e2e fault
# scenarios side by side with batch/v1. Exactness must not depend on pacing.
.PHONY: test-pacing-off
test-pacing-off: cluster-assets ## Run the integration suite and the fault scenarios with all pacing off (not in CI).
	SAFEJOB_PACING=off KUBEBUILDER_ASSETS="$$(hack/k8s-binaries.sh etcd kube-apiserver)" go test ./test/integration/ -count=1 -timeout 40m
	SAFEJOB_PACING=off KUBEBUILDER_ASSETS="$$(hack/k8s-binaries.sh etcd kube-apiserver)" go test ./test/e2e/ -run 'TestFaults' -count=1 -timeout 40m

# A CronJob whose jobTemplate names SafeJob beside a scheduled SafeJob,
# through the same outage of their controllers (docs/managed-jobs.md).
.PHONY: compare-cronjob
compare-cronjob: cluster-assets ## Run a CronJob and a scheduled SafeJob through one outage; writes CRONJOB_OUT (not in CI, about 5 minutes).
	SAFEJOB_CRONJOB=$(abspath $(CRONJOB_OUT)) KUBEBUILDER_ASSETS="$$(hack/k8s-binaries.sh etcd kube-apiserver)" \
		go test ./test/e2e/ -run 'TestScheduleOutageBesideCronJob' -count=1 -v -timeout 20m

.PHONY: test-compat
test-compat: manifests generate ## Run the integration and parity suites on each older Kubernetes, the Kueue e2e cases on each older Kueue; prints each run's time (not in CI).
	@set -e; for v in $(COMPAT_K8S_VERSIONS); do \
		start=$$(date +%s); echo "==> Kubernetes $$v: building its binaries (cached)"; \
		assets=$$(K8S_VERSION=$$v hack/k8s-binaries.sh etcd kube-apiserver kube-scheduler kube-controller-manager kubectl); \
		K8S_VERSION=$$v KUBEBUILDER_ASSETS=$$assets go test ./test/integration/ -count=1 -timeout 40m; \
		K8S_VERSION=$$v KUBEBUILDER_ASSETS=$$assets go test ./test/e2e/ -run 'TestParity' -count=1 -timeout 40m; \
		echo "==> Kubernetes $$v: integration and parity passed in $$(( $$(date +%s) - start )) s"; \
	done; \
	for k in $(COMPAT_KUEUE_VERSIONS); do \
		start=$$(date +%s); KUEUE_VERSION=$$k hack/kueue.sh >/dev/null; \
		KUEUE_VERSION=$$k KUBEBUILDER_ASSETS="$$(hack/k8s-binaries.sh etcd kube-apiserver)" \
			go test ./test/integration/ ./test/e2e/ -run 'Kueue' -count=1 -timeout 40m; \
		echo "==> Kueue $$k: Kueue cases passed in $$(( $$(date +%s) - start )) s"; \
	done

.PHONY: test-rules
test-rules: promtool ## Check the alerts of config/prometheus with promtool and run their unit tests (hack/prometheus/rules_test.yaml).
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
		go run ./hack/prometheus -in config/prometheus/rules.yaml -out "$$tmp/rules.yaml"; \
		cp hack/prometheus/rules_test.yaml "$$tmp/"; \
		$(PROMTOOL) check rules "$$tmp/rules.yaml"; \
		$(PROMTOOL) test rules "$$tmp/rules_test.yaml"

.PHONY: test-unit
test-unit: ## Run the tests that need no cluster.
	go test ./api/... ./internal/... -count=1

.PHONY: test-e2e
test-e2e: ## Run only the end-to-end suite on the local cluster (quick fault variants).
	go test ./test/e2e/ -count=1 -v -timeout 40m

.PHONY: bench
bench: build cluster-assets ## Benchmark SafeJob against the built-in Job controller and the limit: BENCHMARKS.md, docs/benchmarks.png (BENCH_ARGS=... to change).
	go run ./hack/bench -manager bin/manager $(BENCH_ARGS)

.PHONY: bench-scale
# W5 runs at 1k, 10k and 20k completions: at 50k neither controller finishes within a run's 20 minutes here.
bench-scale: build cluster-assets ## W1 and W2 at three sizes, W4, W5 at 1k/10k/20k completions, W6 (Kueue): BENCHMARKS-scale.md, docs/benchmarks-scale*.svg (hours; interrupted, BENCH_ARGS=-resume continues it).
	go run ./hack/bench -manager bin/manager -workloads W1,W2,W4,W5,W6 -sizes "1,3,10 W4:1 W5:0.01,0.1,0.2 W6:1" -repeats 1 \
		-defaults=false -out BENCHMARKS-scale.md -json bench-scale-results.json -chart docs/benchmarks-scale.png $(BENCH_ARGS)

.PHONY: bench-ledger
bench-ledger: ## The ledger decision's cost per completion at 1k-100k completions, parallelism 100-2000: a section of BENCHMARKS.md.
	go run ./hack/benchledger

.PHONY: bench-writes
bench-writes: envtest-assets ## kube-apiserver's CPU per status write: a Job's, and a SafeJob's by ledger length (WRITECOST_ARGS=... to change).
	KUBEBUILDER_ASSETS="$$(hack/k8s-binaries.sh etcd kube-apiserver)" go run ./hack/writecost $(WRITECOST_ARGS)

.PHONY: chaos
chaos: ## Soak every fault scenario (larger, longer) and print the SafeJob/batch/v1 table.
	SAFEJOB_CHAOS=$(CURDIR)/chaos-results.md go test ./test/e2e/ -run TestFaults -count=1 -v -timeout 180m
	@cat chaos-results.md

.PHONY: fuzz
fuzz: ## Fuzz the ledger's decoding and folding for a minute.
	go test ./internal/ledger/jobs -run '^$$' -fuzz FuzzReplayFold -fuzztime 60s

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager binary.
	go build -buildvcs=auto -o bin/manager ./cmd # records the commit, which the benchmark report names

.PHONY: run
run: build kubectl ## Run SafeJob on a local cluster with the samples (MULTIKUEUE=1: a manager and a worker cluster); `make run KUBECONFIG=path`: install it on that cluster and run it there.
	@go build -o bin/localcluster ./hack/localcluster
	@RUN_KUBECONFIG=$(if $(filter command line,$(origin KUBECONFIG)),$(KUBECONFIG)) KUBECTL=$(KUBECTL) MANAGER=bin/manager \
		LOCALCLUSTER=bin/localcluster MULTIKUEUE=$(MULTIKUEUE) exec hack/run.sh $(RUN_ARGS)
# (Built, then run: `go run` exits 1 when Ctrl-C interrupts it, whatever its
# program does, and make would report an error.) Only a kubeconfig named on
# make's command line counts: one in the environment or ~/.kube/config may
# point at a cluster that matters.

.PHONY: cluster
cluster: ## Start the local cluster only (Ctrl-C stops it).
	@go build -o bin/localcluster ./hack/localcluster && exec bin/localcluster up

##@ Deployment

.PHONY: kubectl
kubectl: ## Build the pinned kubectl.
	@hack/k8s-binaries.sh kubectl >/dev/null

.PHONY: install
install: manifests kubectl ## Install the CRD and its admission policies into the cluster of the current kubeconfig.
	$(KUBECTL) apply --server-side --force-conflicts -f config/crd/bases $(addprefix -f ,$(POLICIES))

.PHONY: uninstall
uninstall: manifests kubectl ## Uninstall the CRD and its admission policies.
	$(KUBECTL) delete --ignore-not-found -f config/crd/bases $(addprefix -f ,$(POLICIES))

.PHONY: plugin
plugin: ## Build the kubectl plugin into bin/kubectl-safejob; put bin/ on PATH and run `kubectl safejob`.
	go build -o bin/kubectl-safejob ./cmd/kubectl-safejob
	install -m 0755 cmd/kubectl-safejob/kubectl_complete-safejob bin/

VERSION ?= v0.0.0-dev
# The manager reports VERSION (--version, its start line) when one is given;
# without, the commit it was built from, when the toolchain recorded one.
MANAGER_LDFLAGS = $(if $(filter v0.0.0-dev,$(VERSION)),,-ldflags "-X main.version=$(VERSION)")
.PHONY: krew
krew: ## Build the plugin's release archives and krew manifest into dist/krew (VERSION=v0.1.0).
	go run ./hack/release -version $(VERSION) -out dist/krew

.PHONY: image
image: ## Build the operator image $(IMG) as an OCI image layout tarball, dist/safejob-image.tar, with Go alone (no container engine; VERSION=v0.1.0 sets its version).
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH) go build -trimpath $(MANAGER_LDFLAGS) -o bin/manager-linux-$(GOARCH) ./cmd
	go run ./hack/image -binary bin/manager-linux-$(GOARCH) -arch $(GOARCH) -ref $(IMG) -out dist/safejob-image.tar

.PHONY: docker-build
docker-build: ## Build the operator image $(IMG) (needs a container engine; none is used by the tests).
	docker build -t $(IMG) .

.PHONY: deploy
deploy: manifests kubectl ## Deploy the controller (image $(IMG)) to the cluster of the current kubeconfig.
	cd config/manager && $(KUBECTL) kustomize . >/dev/null
	$(KUBECTL) kustomize config/default | sed 's#controller:latest#$(IMG)#' | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
# The operator removes its own finalizers: `kubectl safejob uninstall` deletes every SafeJob
# and waits until the operator has let go of their pods, runs and Workloads before the
# operator itself goes. It refuses while SafeJobs run; STOP=1 stops them.
undeploy: kubectl ## Remove SafeJob from the cluster, safely (STOP=1: stop running SafeJobs first).
	go run ./cmd/kubectl-safejob uninstall --delete-crd $(if $(STOP),--stop)
	$(KUBECTL) kustomize config/default | $(KUBECTL) delete --ignore-not-found -f -

##@ Tools

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN):
	hack/go-install.sh $@ sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: crd-ref-docs
crd-ref-docs: $(CRD_REF_DOCS)
$(CRD_REF_DOCS):
	hack/go-install.sh $@ github.com/elastic/crd-ref-docs@$(CRD_REF_DOCS_VERSION)

.PHONY: promtool
promtool: $(PROMTOOL)
$(PROMTOOL):
	hack/go-install.sh $@ github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION)

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT):
	hack/go-install.sh $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
