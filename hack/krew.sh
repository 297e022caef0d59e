#!/usr/bin/env bash
# Builds the pinned krew binary (the kubectl plugin manager) from the Go module proxy into the cache and prints its path.
set -euo pipefail
exec "$(dirname "$0")/cached-tool.sh" krew "${KREW_VERSION:-v0.4.3}" sigs.k8s.io/krew/cmd/krew
