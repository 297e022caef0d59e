#!/usr/bin/env bash
# run.sh: what `make run` runs. With a kubeconfig named on make's command line
# (make run KUBECONFIG=path, passed here as RUN_KUBECONFIG), it prints the
# context it will use, installs the CRD and its admission policies there, and
# runs the operator against that cluster. Otherwise it runs everything on the
# built-in local cluster, whatever $KUBECONFIG or ~/.kube/config say: a
# kubeconfig found by chance may point at a cluster that matters.
#
# On a named cluster its arguments go to the operator (make run RUN_ARGS=...).
# Environment: RUN_KUBECONFIG, KUBECTL (the pinned kubectl), MANAGER (the
# operator binary), LOCALCLUSTER (the local cluster's binary), MULTIKUEUE.
set -euo pipefail
: "${KUBECTL:?}" "${MANAGER:?}"

if [[ -n "${RUN_KUBECONFIG:-}" ]]; then
	export KUBECONFIG="${RUN_KUBECONFIG}"
	context=$("${KUBECTL}" config current-context) || {
		echo "run: ${KUBECONFIG} names no current context; set one with kubectl config use-context" >&2
		exit 1
	}
	server=$("${KUBECTL}" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
	echo "Running SafeJob against context ${context} (${server}) of ${KUBECONFIG}"
	echo "Installing the SafeJob CRD and its admission policies there"
	policies=()
	for f in config/policy/*-*.yaml; do policies+=(-f "${f}"); done
	"${KUBECTL}" apply --server-side --force-conflicts -f config/crd/bases "${policies[@]}"
	exec "${MANAGER}" --health-probe-bind-address=127.0.0.1:8081 "$@"
fi

: "${LOCALCLUSTER:?}"
if [[ -n "${KUBECONFIG:-}" || -f "${HOME}/.kube/config" ]]; then
	echo "Using the built-in local cluster; your kubeconfig is left alone (make run KUBECONFIG=path runs SafeJob on the cluster it names)"
fi
unset KUBECONFIG
exec "${LOCALCLUSTER}" ${MULTIKUEUE:+-multikueue} -manager "${MANAGER}" run
