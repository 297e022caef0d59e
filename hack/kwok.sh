#!/usr/bin/env bash
# Builds the pinned KWOK binary from the Go module proxy into the cache and
# prints its path.
set -euo pipefail
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
CACHE="${SAFEJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safejob}"
bin="${CACHE}/tools/kwok-${KWOK_VERSION}"
if [ ! -x "${bin}" ]; then
	mkdir -p "$(dirname "${bin}")"
	exec 9>"${bin}.lock"
	flock 9
	[ -x "${bin}" ] || "$(dirname "$0")/go-install.sh" "${bin}" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
fi
echo "${bin}"
