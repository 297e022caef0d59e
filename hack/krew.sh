#!/usr/bin/env bash
# Builds the pinned krew binary (the kubectl plugin manager) from the Go module proxy into the cache and
# prints its path.
set -euo pipefail
KREW_VERSION="${KREW_VERSION:-v0.4.3}"
CACHE="${SAFEJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safejob}"
bin="${CACHE}/tools/krew-${KREW_VERSION}"
if [ ! -x "${bin}" ]; then
	mkdir -p "$(dirname "${bin}")"
	exec 9>"${bin}.lock"
	flock 9
	[ -x "${bin}" ] || "$(dirname "$0")/go-install.sh" "${bin}" "sigs.k8s.io/krew/cmd/krew@${KREW_VERSION}"
fi
echo "${bin}"
