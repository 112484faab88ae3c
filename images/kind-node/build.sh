#!/usr/bin/env bash
# Assemble a kind node image offline, the way `kind build node-image` does, from things built on this machine:
#   1. root filesystems from debootstrap (Debian bookworm): a minimal one, one with python3, one for the node;
#   2. the node's base image: kind's own base files (from the kind module source) on the node root filesystem,
#      with Debian's systemd, and containerd 2 and runc built here (hack/toolchain.py, the pinned versions);
#   3. images for every pod kubeadm and kind start: kube-apiserver, kube-controller-manager, kube-scheduler,
#      kube-proxy, etcd, coredns, pause (compiled from the Kubernetes source), testbed-netd (the CNI), and kind's
#      default storage: rancher's local-path-provisioner and the helper image its volume set-up pods run;
#   4. the node image: base + kubeadm/kubelet/kubectl + /kind/version + /kind/manifests (default-cni.yaml,
#      default-storage.yaml) + those images imported into containerd's k8s.io namespace, committed with kind's
#      entrypoint.
# Every step is skipped when its image already exists, so a second run builds nothing.
#
# Usage: build.sh NODE_IMAGE   (needs docker, debootstrap, gcc, go)
# hack/toolchain.py is the one source of the pinned versions (versions.yml), of the cache folder
# ($GPU_TESTBED_CACHE or its default) and of the binaries, which it builds here unless they are cached.
# Env:   DEBIAN_MIRROR (default: the first deb.debian.org-style URI in the apt sources)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
node_image=${1:?usage: build.sh NODE_IMAGE}
toolchain() { python3 "$repo/hack/toolchain.py" "$@"; }
k8s=$(toolchain version kubernetes_version)
kind_version=$(toolchain version kind_version)
etcd_tag=$(toolchain version etcd_image_tag)
coredns_version=$(toolchain version coredns_version)
local_path_version=$(toolchain version local_path_provisioner_version)
containerd_version=$(toolchain version containerd_version)
runc_version=$(toolchain version runc_version)
cache=$(toolchain cache-dir)
bin=$(toolchain bindir)
work=$cache/node-image
mkdir -p "$work"
mirror=${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}

log() { printf '%s node-image: %s\n' "$(date -u +%T)" "$*"; }
have() { docker image inspect "$1" >/dev/null 2>&1; }
digest() { sha256sum | cut -c1-12; }
prune() {  # REPOSITORY KEEP: untag the repository's other tags (an earlier package list or runtime). One that a
  # container still uses (an interrupted build's) stays, and is no reason to fail: uninstall removes them all.
  local old
  for old in $(docker image ls "$1" --format '{{.Repository}}:{{.Tag}}' | { grep -vxF "$2" || true; }); do
    docker image rm "$old" >/dev/null 2>&1 || log "kept $old (in use)"
  done
}
build() {  # docker build ARGS...; quiet unless it fails (the legacy builder's deprecation notice is noise here)
  local out
  out=$(docker build --quiet "$@" 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
}
timed() { local started=$SECONDS; "$@"; log "  done in $((SECONDS - started))s"; }

# --- 1. root filesystems ---------------------------------------------------------------------------------------
rootfs_image() {  # NAME PACKAGES(comma-separated, may be empty)
  local name=$1 packages=$2 dir="$work/rootfs-${1//[:\/]/-}"
  have "$name" && return
  log "debootstrap $name (${packages:-minbase})"
  rm -rf "$dir"
  debootstrap --variant=minbase ${packages:+--include="$packages"} bookworm "$dir" "$mirror" >"$dir.log" 2>&1 \
    || { tail -20 "$dir.log"; exit 1; }
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c . | docker import - "$name" >/dev/null
  rm -rf "$dir"
}

# --- 2. base image ------------------------------------------------------------------------------------------------
base_image() {  # NAME
  have "$1" && return
  log "base image $1 from kind $kind_version's base files, containerd $containerd_version, runc $runc_version"
  local ctx="$work/base-context" b
  rm -rf "$ctx" && mkdir -p "$ctx/runtime"
  cp -r "$kind_src/images/base/files" "$ctx/files"
  chmod -R u+w "$ctx/files"
  for b in containerd containerd-shim-runc-v2 ctr runc; do cp -L "$bin/$b" "$ctx/runtime/"; done
  cp "$here/base.Dockerfile" "$ctx/Dockerfile"
  build --build-arg ROOTFS="$node_rootfs" --tag "$1" "$ctx"
}

# --- 3. images of the cluster's own pods ----------------------------------------------------------------------
binary_image() {  # NAME BASE BINARY... ; ENTRYPOINT is the first binary
  local name=$1 base=$2; shift 2
  have "$name" && return
  log "image $name"
  local ctx="$work/ctx-$(basename "${name%%:*}")"
  rm -rf "$ctx" && mkdir -p "$ctx"
  local copies=""
  for b in "$@"; do cp -L "$b" "$ctx/"; copies+="COPY $(basename "$b") /usr/local/bin/$(basename "$b")"$'\n'; done
  printf 'FROM %s\n%sENTRYPOINT ["/usr/local/bin/%s"]\n' "$base" "$copies" "$(basename "$1")" >"$ctx/Dockerfile"
  build --tag "$name" "$ctx"
}

pause_image() {  # NAME...
  local name
  for name in "$@"; do have "$name" || break; done
  have "$name" && return
  log "image pause (compiled from Kubernetes $k8s build/pause/linux/pause.c)"
  local ctx="$work/ctx-pause"
  rm -rf "$ctx" && mkdir -p "$ctx"
  gcc -Os -Wall -Werror -static -DVERSION="\"$k8s-testbed\"" -o "$ctx/pause" "$k8s_src/build/pause/linux/pause.c"
  strip "$ctx/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
  build --tag "$1" "$ctx"
  for name in "${@:2}"; do docker tag "$1" "$name"; done
}

# --- 4. node image --------------------------------------------------------------------------------------------------
node_image() {
  have "$node_image" && { log "$node_image is cached"; return; }
  log "assembling $node_image"
  local images=("$@") id
  id=$(docker run -d --init --privileged --entrypoint=sleep "$base" infinity)
  trap 'docker rm -f "$id" >/dev/null 2>&1 || true' EXIT
  for b in kubeadm kubelet kubectl; do docker cp -L "$bin/$b" "$id:/usr/bin/$b"; done
  docker exec "$id" bash -c "mkdir -p /kind/manifests && echo $k8s > /kind/version"
  sed "s/IMAGE_TAG/$k8s/" "$here/../kind-netd/default-cni.yaml" | docker exec -i "$id" tee /kind/manifests/default-cni.yaml >/dev/null
  # kind's default storage manifest with this image's provisioner and helper (comment lines left as written).
  sed "/^#/!{s|PROVISIONER_IMAGE|$storage_provisioner|;s|HELPER_IMAGE|$storage_helper|;}" "$here/default-storage.yaml" \
    | docker exec -i "$id" tee /kind/manifests/default-storage.yaml >/dev/null
  docker exec "$id" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 & for i in $(seq 50); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done; cat /tmp/containerd.log; exit 1'
  log "  importing ${#images[@]} images into containerd (k8s.io)"
  # Pinned, as kind imports them: the kubelet's image garbage collection never removes them.
  docker save "${images[@]}" | docker exec -i "$id" ctr --namespace=k8s.io images import \
    --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null
  docker exec "$id" bash -c 'pkill containerd; while pgrep -x containerd >/dev/null; do sleep 0.2; done; rm -f /tmp/containerd.log'
  docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' "$id" "$node_image" >/dev/null
  docker rm -f "$id" >/dev/null
  trap - EXIT
}

started=$SECONDS
# The binaries that go into the node image and its component images (each built once, then cached by version).
toolchain build kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns \
  local-path-provisioner containerd containerd-shim-runc-v2 ctr runc | sed 's/^/  /'
kind_src=$(toolchain source kind)
k8s_src=$(toolchain source kubeadm)
timed rootfs_image gpu-testbed/debian:bookworm ""
timed rootfs_image gpu-testbed/python:bookworm "python3,python3-venv,iproute2,ca-certificates"
# The node's packages: kind's base image's list (images/base/Dockerfile) but its container runtime, which is built
# here, and the storage tools no scenario uses; libseccomp2 stays, as in kind's (runc links its own copy statically).
# Tagged by the list, so that a change to it bootstraps a new one.
node_packages="systemd,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,containernetworking-plugins"
node_rootfs=gpu-testbed/kind-rootfs:bookworm-$(digest <<<"$node_packages")
timed rootfs_image "$node_rootfs" "$node_packages"
prune gpu-testbed/kind-rootfs "$node_rootfs"
# The base image, tagged by what goes into it: the root filesystem, kind's base files, the runtime, the Dockerfile.
base=gpu-testbed/kind-base:$kind_version-$(cat "$here/base.Dockerfile" - <<<"$node_rootfs $containerd_version $runc_version" | digest)
timed base_image "$base"
prune gpu-testbed/kind-base "$base"
reg=registry.k8s.io
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  timed binary_image "$reg/$c:$k8s" gpu-testbed/debian:bookworm "$bin/$c"
done
# kube-proxy programs iptables/nftables: it gets the node's own userland.
timed binary_image "$reg/kube-proxy:$k8s" "$node_rootfs" "$bin/kube-proxy"
timed binary_image "$reg/etcd:$etcd_tag" gpu-testbed/debian:bookworm "$bin/etcd"
timed binary_image "$reg/coredns/coredns:$coredns_version" gpu-testbed/debian:bookworm "$bin/coredns"
# The pause image under kubeadm's name for it (PauseVersion in cmd/kubeadm/app/constants), and under the sandbox image
# kind's containerd config names (its pinned sandbox image, which containerd's CRI runs every pod sandbox on).
kubeadm_pause=$(sed -n 's/^\s*PauseVersion = "\(.*\)"$/\1/p' "$k8s_src/cmd/kubeadm/app/constants/constants.go")
kind_sandbox=$(sed -n 's/^\s*sandbox_image = "\(.*\)"$/\1/p' "$kind_src/images/base/files/etc/containerd/config.toml")
[[ $kubeadm_pause && $kind_sandbox == "$reg/pause:"* ]] || {
  log "kubeadm's PauseVersion ('$kubeadm_pause') or kind's sandbox_image ('$kind_sandbox') not found in their sources"
  exit 1
}
pause_tags=("$reg/pause:$kubeadm_pause")
[[ $kind_sandbox == "${pause_tags[0]}" ]] || pause_tags+=("$kind_sandbox")
timed pause_image "${pause_tags[@]}"
if ! have "$reg/testbed-netd:$k8s"; then
  log "image testbed-netd"
  build --tag "$reg/testbed-netd:$k8s" "$here/../kind-netd"
fi
# kind's default storage (default-storage.yaml): the provisioner, and the helper whose pods run the volume set-up
# and teardown scripts with sh, mkdir and rm. kind stages just those into a distroless image; here the helper is the
# minimal Debian image under a second name, whose one layer the control-plane images above already carry, so it
# adds nothing to the node image.
# kind's manifest starts the provisioner as plain `local-path-provisioner`, found on containerd's default PATH.
storage_provisioner=docker.io/gpu-testbed/local-path-provisioner:$local_path_version
storage_helper=docker.io/gpu-testbed/local-path-helper:bookworm
timed binary_image "$storage_provisioner" gpu-testbed/debian:bookworm "$bin/local-path-provisioner"
docker tag gpu-testbed/debian:bookworm "$storage_helper"
timed node_image "$reg/kube-apiserver:$k8s" "$reg/kube-controller-manager:$k8s" "$reg/kube-scheduler:$k8s" \
  "$reg/kube-proxy:$k8s" "$reg/etcd:$etcd_tag" "$reg/coredns/coredns:$coredns_version" "${pause_tags[@]}" \
  "$reg/testbed-netd:$k8s" "$storage_provisioner" "$storage_helper"
log "node image $node_image ready ($(docker image inspect --format '{{.Size}}' "$node_image" | numfmt --to=iec)) in $((SECONDS - started))s"; echo

