#!/bin/sh
# Installs helm (needed by tests/deploy/chart_test.ts) when it is not already
# available. Builds it from source with the Go toolchain, because the machines
# this project runs on reach the Go module proxy but not helm's release
# downloads. Takes a few minutes the first time; a no-op afterwards.
#
#   sh deploy/install-helm.sh          # prints the helm path on success
#   HELM_VERSION=v3.22.0 sh deploy/install-helm.sh
set -eu

# Pinned so chart tests render with a known helm; bump deliberately.
HELM_VERSION="${HELM_VERSION:-v3.22.0}"

if [ -n "${HELM:-}" ] && [ -x "${HELM}" ]; then
	echo "${HELM}"
	exit 0
fi
if command -v helm >/dev/null 2>&1; then
	command -v helm
	exit 0
fi

if ! command -v go >/dev/null 2>&1; then
	echo "install-helm.sh: helm is missing and so is go; install one of them" >&2
	exit 1
fi

gobin="$(go env GOBIN)"
if [ -z "${gobin}" ]; then
	gobin="$(go env GOPATH)/bin"
fi
if [ -x "${gobin}/helm" ]; then
	echo "${gobin}/helm"
	exit 0
fi

echo "install-helm.sh: building helm ${HELM_VERSION} with go install (a few minutes)" >&2
# -mod=mod: resolve helm's own go.mod rather than any vendor/ or workspace here.
GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
"${gobin}/helm" version --short >&2
echo "${gobin}/helm"
