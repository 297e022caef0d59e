#!/usr/bin/env bash
# Builds the pinned KWOK binary from the Go module proxy into the cache and prints its path.
set -euo pipefail
exec "$(dirname "$0")/cached-tool.sh" kwok "${KWOK_VERSION:-v0.8.0}" sigs.k8s.io/kwok/cmd/kwok
