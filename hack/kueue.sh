#!/usr/bin/env bash
# Builds the pinned Kueue manager from the Go module proxy into the cache and
# prints its path.
set -euo pipefail
KUEUE_VERSION="${KUEUE_VERSION:-v0.16.6}"
CACHE="${SAFEJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safejob}"
bin="${CACHE}/tools/kueue-${KUEUE_VERSION}"
if [ ! -x "${bin}" ]; then
	mkdir -p "$(dirname "${bin}")"
	exec 9>"${bin}.lock"
	flock 9
	[ -x "${bin}" ] || "$(dirname "$0")/go-install.sh" "${bin}" "sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION}"
fi
echo "${bin}"
