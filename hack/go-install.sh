#!/usr/bin/env bash
# go-install.sh DEST PKG@VERSION: builds a pinned Go tool into DEST.
set -euo pipefail
dest=$1 pkg=$2
tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT
echo "Installing ${pkg} (first time only)" >&2
GOBIN="${tmp}" GOFLAGS=-mod=mod go install "${pkg}"
mkdir -p "$(dirname "${dest}")"
mv "${tmp}/$(basename "${pkg%@*}")" "${dest}"
