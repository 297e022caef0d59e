#!/usr/bin/env bash
# Builds the pinned Kueue manager from the Go module proxy into the cache and
# prints its path. `go install sigs.k8s.io/kueue/cmd/kueue@VERSION` cannot be
# used: the proxy refuses the module's version list, which `go install`
# reads, so the manager is built inside a throw-away module that requires
# the pinned version.
set -euo pipefail
KUEUE_VERSION="${KUEUE_VERSION:-v0.19.2}"
CACHE="${SAFEJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safejob}"
bin="${CACHE}/tools/kueue-${KUEUE_VERSION}"
if [ ! -x "${bin}" ]; then
	mkdir -p "$(dirname "${bin}")"
	exec 9>"${bin}.lock"
	flock 9
	if [ ! -x "${bin}" ]; then
		echo "Building the Kueue manager ${KUEUE_VERSION} (first time only)" >&2
		tmp=$(mktemp -d)
		trap 'rm -rf "${tmp}"' EXIT
		(
			cd "${tmp}"
			go mod init safejob.dev/kueue-build >/dev/null 2>&1
			GOFLAGS=-mod=mod go get "sigs.k8s.io/kueue@${KUEUE_VERSION}" >&2
			GOFLAGS=-mod=mod go build -trimpath -o "${tmp}/kueue" sigs.k8s.io/kueue/cmd/kueue >&2
		)
		mv "${tmp}/kueue" "${bin}"
	fi
fi
echo "${bin}"
