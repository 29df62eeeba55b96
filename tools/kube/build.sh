#!/usr/bin/env bash
# Builds the Kubernetes control plane that `nox -s tests-kube` runs the GKE backend against,
# from Go modules (the Go module proxy), into a cache outside the repository:
#
#   kube-apiserver, kube-controller-manager, kube-scheduler   k8s.io/kubernetes      (k8s/)
#   etcd                                                      go.etcd.io/etcd/server (k8s/etcd/)
#   kwok                                                      sigs.k8s.io/kwok       (kwok/)
#   kuberay-operator, and the KubeRay CRDs from its module    github.com/ray-project/kuberay/ray-operator (kuberay/)
#
# Each directory beside this script is a Go module whose go.mod and go.sum pin what is built
# (change a version there: `go get <module>@<version> && go mod tidy` in that directory).
# The binaries go to  ${RL_LUSTRE_KUBE_CACHE:-~/.cache/rl_lustre/kube}/<versions>-<hash>/bin,
# where <hash> covers this directory's files, so a changed pin or flag builds anew and an
# unchanged one reuses what is there. GOCACHE and GOMODCACHE are Go's own (outside the repo).
#
# Needs Go >= 1.26 (`go version`). Prints the cache directory (bin/, crds/, versions.env) on its
# last line. A cold build on 2 cores takes about 10-35 minutes, by the load (see README, "Development").
set -euo pipefail

# All in one function: bash reads it whole before running any of it.
main() {
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  cache="${RL_LUSTRE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rl_lustre/kube}"

  if ! command -v go >/dev/null 2>&1; then
    echo "tools/kube/build.sh: the Go toolchain (go >= 1.26) is needed to build the control plane" >&2
    exit 2
  fi
  # The pins are the go.mod files: never let a build rewrite them (this machine may set -mod=mod).
  export GOFLAGS="-mod=readonly -trimpath"

  version() { (cd "$here/$1" && go list -m -f '{{.Version}}' "$2"); }
  k8s="$(version k8s k8s.io/kubernetes)"
  etcd="$(version k8s go.etcd.io/etcd/server/v3)"
  kwok="$(version kwok sigs.k8s.io/kwok)"
  kuberay="$(version kuberay github.com/ray-project/kuberay/ray-operator)"
  hash="$(cd "$here" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name '*.sh' \) \
            -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-10)"
  dir="$cache/k8s-$k8s-etcd-$etcd-kwok-$kwok-kuberay-$kuberay-$hash"
  mkdir -p "$dir/bin"

  # One builder at a time per cache directory; a second one waits, then finds the binaries.
  exec 9>"$dir/.lock"
  flock 9

  minor="${k8s#v1.}"; minor="${minor%%.*}"
  k8s_ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done

  # build <module dir> <binary> <package> <ldflags>: skipped when the binary is there.
  build() {
    local module="$1" binary="$2" package="$3" ldflags="$4"
    if [ -x "$dir/bin/$binary" ]; then
      return
    fi
    echo "building $binary ($package) ..." >&2
    local start=$SECONDS
    (cd "$here/$module" && nice -n 19 go build -ldflags "$ldflags" -o "$dir/bin/.$binary.tmp" "$package")
    mv "$dir/bin/.$binary.tmp" "$dir/bin/$binary"
    echo "built $binary in $((SECONDS - start)) s" >&2
  }

  build k8s kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
  build k8s kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$k8s_ldflags"
  build k8s kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$k8s_ldflags"
  build k8s etcd ./etcd "-s -w"
  build kwok kwok sigs.k8s.io/kwok/cmd/kwok "-s -w"
  build kuberay kuberay-operator github.com/ray-project/kuberay/ray-operator "-s -w"

  # Data from the same modules: the CRDs the operator serves, as KubeRay ships them; kwok's CRDs
  # (its Stage, PortForward and Logs objects) and its own "fast" node and pod stages.
  module_dir() { (cd "$here/$1" && go list -m -f '{{.Dir}}' "$2"); }
  kuberay_dir="$(module_dir kuberay github.com/ray-project/kuberay/ray-operator)"
  kwok_dir="$(module_dir kwok sigs.k8s.io/kwok)"
  mkdir -p "$dir/crds/kuberay" "$dir/crds/kwok" "$dir/kwok-stages"
  cp "$kuberay_dir"/config/crd/bases/ray.io_*.yaml "$dir/crds/kuberay/"
  cp "$kwok_dir"/kustomize/crd/bases/kwok.x-k8s.io_*.yaml "$dir/crds/kwok/"
  cp "$kwok_dir"/kustomize/stage/node/fast/node-initialize.yaml \
     "$kwok_dir"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
     "$kwok_dir"/kustomize/stage/pod/fast/pod-*.yaml "$dir/kwok-stages/"
  chmod -R u+w "$dir/crds" "$dir/kwok-stages"

  printf 'KUBERNETES=%s\nETCD=%s\nKWOK=%s\nKUBERAY=%s\n' "$k8s" "$etcd" "$kwok" "$kuberay" >"$dir/versions.env"
  echo "$dir"
}

main "$@"
