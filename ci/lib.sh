# Shared by the ci/ scripts. Mirrors facts that harness/src/{image,labels}.rs also state:
# keep the two in step (the harness tests check the image tag computed here equals the library's).

IMAGE_REPO=fleet-harness/machine
LABEL_RUN=fleet-harness.run
LABEL_PID=fleet-harness.pid
LABEL_KEEP=fleet-harness.keep
LABEL_IMAGE=fleet-harness.recipe

# Tag of the machine image: first 12 hex digits of sha1(rootfs recipe ++ Dockerfile).
image_tag() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  echo "$IMAGE_REPO:$(cat "$root/ci/image/rootfs" "$root/ci/image/Dockerfile" | sha1sum | cut -c1-12)"
}

# Runs a named step and prints its duration.
step() {
  local name=$1 t0 ms
  shift
  t0=${EPOCHREALTIME/./}
  echo "==> $name"
  # Keep the command's status: callers may run `step ... || status=$?`, where `set -e` does not apply.
  local rc=0
  "$@" || rc=$?
  ms=$(((${EPOCHREALTIME/./} - t0) / 1000))
  printf '    (%s: %d.%02ds)\n' "$name" $((ms / 1000)) $((ms % 1000 / 10))
  return "$rc"
}

# Builds the shipped binaries (profile `ship`: release, panics abort; Cargo.toml) into $CARGO_TARGET_DIR/ship:
# fleetctl and fleet-docs as they are; fleetd linked statically against glibc (still position-independent), with
# identical code folded and its relocations packed. Why: fleetd's idle resident set is mostly code, and the
# kernel's fault-around maps the cached neighbours of every page touched, so all of fleetd's text and most of
# libc.so (1.5-1.6 MiB) were resident in every fleetd. Static, it carries only the libc code it calls; `--icf=all`
# (lld) folds functions that compiled to the same code (Rust promises no distinct addresses for functions);
# `-z pack-relative-relocs` (DT_RELR, glibc >= 2.36) shrinks the 275 KB of relocations it reads at start to 4 KB.
# docs/performance.md, "fleetd's memory". `cargo rustc`'s extra flags apply to the final crate only, which is where
# all three take effect (std's and libc's link attributes are chosen at the final link): no build script or proc
# macro is linked static.
ship_build() {
  cargo build --profile ship -p fleetctl -p fleet-docs --bins || return
  cargo rustc --profile ship -p fleetd --bin fleetd -- -C target-feature=+crt-static \
    -C link-arg=-Wl,--icf=all -C link-arg=-Wl,-z,pack-relative-relocs
}

# Removes containers and networks of harness runs whose owning process is gone
# (same rule as `fleet-harness reap`; clusters made by `fleet-harness up` are kept).
reap_leftovers() {
  local ids id pid keep n=0
  ids=$(docker ps -aq --filter "label=$LABEL_RUN")
  for id in $ids; do
    pid=$(docker inspect -f "{{ index .Config.Labels \"$LABEL_PID\" }}" "$id" 2>/dev/null || true)
    keep=$(docker inspect -f "{{ index .Config.Labels \"$LABEL_KEEP\" }}" "$id" 2>/dev/null || true)
    [[ $keep == true ]] && continue
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && continue
    docker rm -f "$id" >/dev/null 2>&1 && n=$((n + 1))
  done
  local nets net used
  nets=$(docker network ls -q --filter "label=$LABEL_RUN")
  for net in $nets; do
    used=$(docker network inspect -f '{{ len .Containers }}' "$net" 2>/dev/null || echo 0)
    [[ $used == 0 ]] || continue
    pid=$(docker network inspect -f "{{ index .Labels \"$LABEL_PID\" }}" "$net" 2>/dev/null || true)
    keep=$(docker network inspect -f "{{ index .Labels \"$LABEL_KEEP\" }}" "$net" 2>/dev/null || true)
    [[ $keep == true ]] && continue
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && continue
    docker network rm "$net" >/dev/null 2>&1 && n=$((n + 1))
  done
  echo "    removed $n object(s)"
}

mirror() {
  # The Debian mirror this machine's apt already uses (deb822 .sources files first, then sources.list).
  local codename=$1 uri
  uri=$(awk -v s="$codename" '
      /^URIs:/   { u = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) found = u }
      /^$/       { if (found) { print found; exit } u = "" }
      END        { if (found) print found }' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
  if [[ -z $uri && -f /etc/apt/sources.list ]]; then
    uri=$(awk -v s="$codename" '$1 == "deb" && $3 == s { print $2; exit }' /etc/apt/sources.list)
  fi
  [[ -n $uri ]] || { echo "error: no apt source for '$codename' found in /etc/apt" >&2; exit 1; }
  echo "$uri"
}
