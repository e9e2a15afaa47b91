#!/bin/sh
# Run the live systemd probe inside a throw-away machine container (needs the harness's machine image).
# Usage: crates/fleetd/examples/systemd_probe.sh [IMAGE]   (default: newest fleet-harness/machine image)
set -eu
target=${CARGO_TARGET_DIR:-target}
image=${1:-$(docker images --format '{{.Repository}}:{{.Tag}}' | grep -m1 '^fleet-harness/machine:')}
cargo build -q -p fleetd --example systemd_probe
cid=$(docker create --label fleet.dev=agent-probe \
  --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SYS_PTRACE --cap-add SYS_NICE \
  --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
  --tmpfs /run --tmpfs /run/lock --tmpfs /tmp -v /sys/fs/cgroup:/sys/fs/cgroup:rw --cgroupns=host \
  -v "$(realpath "$target")/debug/examples:/opt/fleet:ro" "$image")
trap 'docker rm -f "$cid" >/dev/null' EXIT
tmp=$(mktemp); od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$tmp"; echo >> "$tmp"
docker cp "$tmp" "$cid:/etc/machine-id"; rm -f "$tmp"
docker start "$cid" >/dev/null
for _ in $(seq 1 100); do
  state=$(docker exec "$cid" systemctl is-system-running 2>/dev/null || true)
  [ "$state" = running ] && break; sleep 0.1
done
echo "machine: $state"
docker exec "$cid" /opt/fleet/systemd_probe
