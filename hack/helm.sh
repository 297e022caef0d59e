#!/usr/bin/env bash
# Builds the pinned helm binary from the Go module proxy into the cache and prints its path.
set -euo pipefail
exec "$(dirname "$0")/cached-tool.sh" helm "${HELM_VERSION:-v3.22.0}" helm.sh/helm/v3/cmd/helm
