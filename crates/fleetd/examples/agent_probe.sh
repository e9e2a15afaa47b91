#!/bin/sh
# Live check of the agent runtime: a 2-machine harness cluster without fleet (etcd + systemd machines), the
# `agent_probe` example running as the agent in both machines, and its `drive` mode playing engine and fleetctl.
# Usage: crates/fleetd/examples/agent_probe.sh        (needs the harness machine image; see ci/setup)
set -eu
target=${CARGO_TARGET_DIR:-target}
name=agent-probe
cargo build -q -p fleetd --example agent_probe
cargo build -q -p fleet-harness --bin fleet-harness
harness="$target/debug/fleet-harness"
"$harness" down --name "$name" >/dev/null 2>&1 || true
up=$("$harness" up --no-fleet --machines 2 --name "$name")
trap '"$harness" down --name "$name" >/dev/null' EXIT
state=$(echo "$up" | sed -n 's/.*state \(.*\))$/\1/p')
etcd="http://$(jq -r .etcd "$state"):2379"
c1=$(jq -r '.machines[0].container' "$state"); m1=$(jq -r '.machines[0].id' "$state")
c2=$(jq -r '.machines[1].container' "$state"); m2=$(jq -r '.machines[1].id' "$state")
etcd_container=$(jq -r .etcd "$state")
echo "cluster up: etcd $etcd, m1 $m1 ($c1), m2 $m2 ($c2)"

for c in "$c1" "$c2"; do
  docker cp "$target/debug/examples/agent_probe" "$c:/usr/local/bin/agent_probe"
  docker exec "$c" systemd-run --unit=agent-probe --setenv=RUST_LOG=fleet=info \
    /usr/local/bin/agent_probe agent "$etcd" >/dev/null
done

out=$(mktemp)
docker exec "$c1" /usr/local/bin/agent_probe drive "$etcd" "$m1" "$m2" > "$out" || { cat "$out"; rm -f "$out"; exit 1; }
cat "$out"
stop_post=$(sed -n 's/^STOP_POST_HERE //p' "$out"); rm -f "$out"
start_pre=$(docker exec "$c2" cat /tmp/move-start-pre)
if [ -n "$stop_post" ] && [ -n "$start_pre" ] && awk -v a="$stop_post" -v b="$start_pre" 'BEGIN { exit !(a < b) }'; then
  echo "PASS cross-machine move: ExecStopPost(v1 on m1) $stop_post < ExecStartPre(v2 on m2) $start_pre"
else
  echo "FAIL cross-machine move: ExecStopPost(v1 on m1) $stop_post >= ExecStartPre(v2 on m2) $start_pre"; exit 1
fi

# etcd gone for longer than the TTL (3 s): leases are lost, units keep running; afterwards both agents register
# under new leases and re-bind their states and markers.
pid1=$(docker exec "$c1" systemctl show -p MainPID --value probe-sync.service)
docker stop -t 1 "$etcd_container" >/dev/null
sleep 8
a1=$(docker exec "$c1" systemctl is-active probe-sync.service); a2=$(docker exec "$c2" systemctl is-active probe-move.service)
docker start "$etcd_container" >/dev/null
[ "$a1/$a2" = active/active ] && echo "PASS units kept running without etcd: $a1/$a2" || { echo "FAIL units without etcd: $a1/$a2"; exit 1; }
docker exec "$c1" /usr/local/bin/agent_probe after-outage "$etcd" "$m1" "$m2"
pid1b=$(docker exec "$c1" systemctl show -p MainPID --value probe-sync.service)
[ "$pid1" = "$pid1b" ] && echo "PASS probe-sync never restarted (MainPID $pid1)" || { echo "FAIL probe-sync restarted: $pid1 -> $pid1b"; exit 1; }

# SIGUSR1 dump, then SIGTERM purge on m2.
docker exec "$c2" systemctl kill -s USR1 agent-probe.service
sleep 0.5
dump=$(docker exec "$c2" journalctl -u agent-probe.service -o cat | grep -m1 '"TargetStates"' || true)
echo "$dump" | grep -q '"probe-move.service":"launched"' && echo "PASS SIGUSR1 dump: $dump" || { echo "FAIL SIGUSR1 dump: $dump"; exit 1; }
docker exec "$c2" systemctl stop agent-probe.service
left=$(docker exec "$c2" sh -c 'ls /run/fleet/units; systemctl is-active probe-move.service || true')
[ "$left" = inactive ] && echo "PASS purge on m2: no unit files, probe-move inactive" || { echo "FAIL purge on m2: $left"; exit 1; }
docker exec "$c1" /usr/local/bin/agent_probe purged "$etcd" "$m2"
echo "--- m1 agent log (tasks) ---"
docker exec "$c1" journalctl -u agent-probe.service -o cat | grep -E 'AgentReconciler|lease lost|registered' | sed 's/\x1b\[[0-9;]*m//g' | tail -30
echo "--- m2 agent log (tasks) ---"
docker exec "$c2" journalctl -u agent-probe.service -o cat | grep -E 'AgentReconciler|lease lost|registered' | sed 's/\x1b\[[0-9;]*m//g' | tail -30
