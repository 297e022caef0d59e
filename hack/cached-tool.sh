#!/usr/bin/env bash
# cached-tool.sh NAME VERSION PKG: builds the pinned Go tool PKG@VERSION from
# the Go module proxy into the cache, once (concurrent callers wait on a
# lock), and prints its path.
set -euo pipefail
name=$1 version=$2 pkg=$3
CACHE="${SAFEJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safejob}"
bin="${CACHE}/tools/${name}-${version}"
if [ ! -x "${bin}" ]; then
	mkdir -p "$(dirname "${bin}")"
	exec 9>"${bin}.lock"
	flock 9
	[ -x "${bin}" ] || "$(dirname "$0")/go-install.sh" "${bin}" "${pkg}@${version}"
fi
echo "${bin}"
