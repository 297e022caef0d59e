#!/usr/bin/env bash
# Builds the pinned helm binary from the Go module proxy into the cache and
# prints its path.
set -euo pipefail
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${SAFEJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safejob}"
bin="${CACHE}/tools/helm-${HELM_VERSION}"
if [ ! -x "${bin}" ]; then
	mkdir -p "$(dirname "${bin}")"
	exec 9>"${bin}.lock"
	flock 9
	[ -x "${bin}" ] || "$(dirname "$0")/go-install.sh" "${bin}" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
fi
echo "${bin}"
