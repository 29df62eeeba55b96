#!/bin/bash
# rl_lustre's preload builder: the startup script of the temporary VM that turns a container
# image into a GKE secondary boot disk of mode CONTAINER_IMAGE_CACHE.
#
# Its inputs are instance metadata (rl-lustre-images: the references to pull, pinned by
# digest; rl-lustre-pull-auth: none | google). It reports through guest attributes under
# rl-lustre/: status (running, done, failed), progress, unpacked-bytes, error.
#
# The disk it leaves (the layout GKE's containerd plugin reads, as Google's
# gke-disk-image-builder writes it): an ext4 filesystem holding snapshots/<id>/fs (the
# overlayfs snapshotter's unpacked layers), snapshots.metadata (one line per committed
# snapshot: its containerd key, a space, snapshots/<id>/fs) and images.metadata (ctr images ls).
# Unlike that builder, containerd unpacks straight onto the data disk and the layers are then
# renamed into place (same filesystem: no second copy of the unpacked image).
set -euo pipefail

MD="${RL_LUSTRE_METADATA_URL:-http://metadata.google.internal/computeMetadata/v1}"
DEVICE="${RL_LUSTRE_DEVICE:-/dev/disk/by-id/google-rl-lustre-data}"
ROOT="${RL_LUSTRE_MOUNT:-/mnt/disks/container_layers}"
STATE="${RL_LUSTRE_STATE:-/run/rl-lustre-containerd}"
SOCK="$STATE/containerd.sock"
CTR_ROOT="$ROOT/.containerd"
SNAPSHOTS="$CTR_ROOT/io.containerd.snapshotter.v1.overlayfs/snapshots"
NS=k8s.io

attr() {  # attr KEY VALUE: a guest attribute rl-lustre/KEY
  curl -sf -X PUT --data "$2" -H 'Metadata-Flavor: Google' "$MD/instance/guest-attributes/rl-lustre/$1" >/dev/null || true
}
meta() {  # meta KEY: an instance attribute ("" when absent)
  curl -sf -H 'Metadata-Flavor: Google' "$MD/instance/attributes/$1" || true
}
fail() {
  trap - ERR
  echo "rl-lustre: failed: $1"
  attr error "$1"
  attr status failed
  exit 1
}
trap 'fail "line $LINENO: $BASH_COMMAND exited $?"' ERR
ctr_() { ctr --address "$SOCK" -n "$NS" "$@"; }

attr status running
IMAGES="$(meta rl-lustre-images)"
AUTH="$(meta rl-lustre-pull-auth)"
[ -n "$IMAGES" ] || fail "no image to pull (metadata rl-lustre-images is empty)"
[ -e "$DEVICE" ] || fail "no data disk at $DEVICE"

if ! command -v ctr >/dev/null || ! command -v containerd >/dev/null; then
  attr progress "installing containerd"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq containerd >/dev/null
fi

attr progress "formatting the data disk"
mkfs.ext4 -F -q -m 0 -E lazy_itable_init=0,lazy_journal_init=0,discard "$DEVICE"
mkdir -p "$ROOT" "$STATE"
mount -o discard,defaults "$DEVICE" "$ROOT"
CAPACITY="$(df --output=size -B1 "$ROOT" | tail -n 1 | tr -d ' ')"

containerd --root "$CTR_ROOT" --state "$STATE" --address "$SOCK" >"$STATE/containerd.log" 2>&1 &
CONTAINERD=$!
for _ in $(seq 1 60); do [ -S "$SOCK" ] && break; sleep 1; done
[ -S "$SOCK" ] || fail "containerd did not start: $(tail -n 3 "$STATE/containerd.log" | tr '\n' ' ')"

USER_ARGS=()
if [ "$AUTH" = "google" ]; then
  TOKEN="$(curl -sf -H 'Metadata-Flavor: Google' "$MD/instance/service-accounts/default/token" \
    | sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p')"
  [ -n "$TOKEN" ] || fail "no access token from the metadata server for the registry"
  USER_ARGS=(--user "oauth2accesstoken:$TOKEN")
fi

count=0
total="$(wc -w <<<"$IMAGES")"
for image in $IMAGES; do
  count=$((count + 1))
  attr progress "pulling and unpacking image $count of $total"
  if ! ctr_ images pull "${USER_ARGS[@]}" "$image" >"$STATE/pull.log" 2>&1; then
    used="$(df --output=used -B1 "$ROOT" | tail -n 1 | tr -d ' ')"
    if grep -qi "no space left" "$STATE/pull.log"; then
      fail "disk too small: unpacked $used bytes > $CAPACITY"
    fi
    fail "ctr images pull $image: $(tail -n 2 "$STATE/pull.log" | tr '\n' ' ')"
  fi
done
unset TOKEN USER_ARGS

attr progress "mapping the unpacked layers"
ctr_ images ls >"$ROOT/images.metadata"
: >"$ROOT/snapshots.map"
i=0
while read -r key _; do
  i=$((i + 1))
  ctr_ snapshots view "rl-lustre-view-$i" "$key" >/dev/null
  # A view of a committed snapshot mounts that snapshot's fs first: its id is the layer's.
  fs="$(ctr_ snapshots mounts /rl-lustre-unused "rl-lustre-view-$i" | grep -o '/snapshots/[0-9]*/fs' | head -n 1)"
  ctr_ snapshots rm "rl-lustre-view-$i" >/dev/null
  [ -n "$fs" ] || fail "no overlayfs layer found for snapshot $key"
  echo "$key ${fs#/}" >>"$ROOT/snapshots.map"
done < <(ctr_ snapshots ls | awk 'NR > 1 && $NF == "Committed" {print $1}')  # KIND is last: a base layer has no PARENT
[ -s "$ROOT/snapshots.map" ] || fail "the pull left no committed snapshot"

kill "$CONTAINERD"
wait "$CONTAINERD" || true

mkdir -p "$ROOT/snapshots"
while read -r key path; do
  id="${path#snapshots/}"
  id="${id%/fs}"
  mv "$SNAPSHOTS/$id" "$ROOT/snapshots/$id"
done <"$ROOT/snapshots.map"
mv "$ROOT/snapshots.map" "$ROOT/snapshots.metadata"
rm -rf "$CTR_ROOT"
fstrim "$ROOT" || true
UNPACKED="$(du -sb "$ROOT" | cut -f 1)"
LAYERS="$(wc -l <"$ROOT/snapshots.metadata")"
sync
umount "$ROOT"
attr unpacked-bytes "$UNPACKED"
attr progress "done: $LAYERS layers, $UNPACKED bytes"
echo "rl-lustre: done"
attr status "done"
