#!/usr/bin/env bash
# Builds the pinned Kubernetes control-plane binaries (and etcd) from the Go
# module proxy into a cache outside the repository, then prints the directory.
# Usage: hack/k8s-binaries.sh [binary ...]
#   default binaries: etcd kube-apiserver
#   known: etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.5}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
CACHE="${SAFEJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safejob}"
OUT="${CACHE}/k8s-${K8S_VERSION}"

bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(etcd kube-apiserver)

log() { echo "k8s-binaries: $*" >&2; }

missing=()
for b in "${bins[@]}"; do
	[ -x "${OUT}/${b}" ] || missing+=("$b")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "${OUT}"
	exit 0
fi

mkdir -p "${OUT}"
# One build at a time: concurrent callers (parallel test packages) wait here.
exec 9>"${OUT}/.lock"
flock 9
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

build_k8s() {
	local mod="${work}/k8s"
	mkdir -p "${mod}"
	cat >"${mod}/go.mod" <<MOD
module safejob.local/k8sbuild

go 1.25

require k8s.io/kubernetes ${K8S_VERSION}
MOD
	# Every staging module k8s.io/kubernetes replaces with ./staging/... must
	# be pointed at its published version.
	local staging dir
	dir=$(cd "${work}" && GOFLAGS= go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	[ -n "${dir}" ] || { log "cannot download k8s.io/kubernetes@${K8S_VERSION}"; exit 1; }
	staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "${dir}")
	for s in ${staging}; do
		echo "replace ${s} => ${s} ${STAGING_VERSION}" >>"${mod}/go.mod"
	done
	local pkgs=()
	for b in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/${b}"); done
	(
		cd "${mod}"
		cat >tools.go <<'GO'
//go:build tools

package tools
GO
		GOFLAGS=-mod=mod go get "k8s.io/kubernetes@${K8S_VERSION}" >/dev/null 2>&1 || true
		for p in "${pkgs[@]}"; do GOFLAGS=-mod=mod go get "${p}@${K8S_VERSION}" >/dev/null 2>&1 || true; done
		local ld="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION}"
		ld+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${STAGING_VERSION#v0.}"
		for b in "$@"; do
			log "building ${b} ${K8S_VERSION} (first time only; several minutes)"
			GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "${ld}" -o "${OUT}/${b}.tmp" "k8s.io/kubernetes/cmd/${b}"
			mv "${OUT}/${b}.tmp" "${OUT}/${b}"
		done
	)
}

build_etcd() {
	local mod="${work}/etcd"
	mkdir -p "${mod}"
	cat >"${mod}/go.mod" <<MOD
module safejob.local/etcdbuild

go 1.25

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
MOD
	(
		cd "${mod}"
		GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >/dev/null 2>&1 || true
		log "building etcd ${ETCD_VERSION} (first time only)"
		GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${OUT}/etcd.tmp" go.etcd.io/etcd/server/v3
		mv "${OUT}/etcd.tmp" "${OUT}/etcd"
	)
}

k8s=()
for b in "${missing[@]}"; do
	[ -x "${OUT}/${b}" ] && continue
	case "$b" in
	etcd) build_etcd ;;
	kube-apiserver | kube-controller-manager | kube-scheduler | kubectl) k8s+=("$b") ;;
	*) log "unknown binary ${b}"; exit 2 ;;
	esac
done
[ ${#k8s[@]} -eq 0 ] || build_k8s "${k8s[@]}"
echo "${OUT}"
