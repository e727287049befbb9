#!/usr/bin/env bash
# (A copy of the development machines' ../shared/container-engine.sh, so CI does not depend on a
# folder outside the repository, plus the DNS plugin below; `make test-image` runs it only when
# no engine answers.)
# container-engine.sh: bring up a real container engine on this kind of machine (Debian 12, root,
# no systemd, hybrid cgroups, no CAP_SYS_RESOURCE, no image registry reachable), so the project's
# Dockerfile and docker-compose.yml can be built and run for real, in tests and in CI.
#
#   sudo-less, as root:   bash ../shared/container-engine.sh        (idempotent; about 4-6 min
#                                                                   the first time, seconds after)
#   then:                 export DOCKER_HOST=unix:///run/podman/podman.sock
#                         podman build --format docker -t ingot:local .
#                         docker-compose -f docker-compose.yml ... up -d
#
# What it does, and why (each step was measured on this kind of machine):
# 1. apt: podman, runc, docker-compose (Compose v1.29, Debian's; Compose v2 is not packaged),
#    debootstrap. podman-compose is NOT used: v1.0.3 ignores `profiles`, leaves `${VAR:-}`
#    literal and fails on `network_mode: none`.
# 2. /etc/containers/containers.conf: runtime runc (crun 1.8 refuses this hybrid cgroup layout:
#    "cgroups in hybrid mode not supported") and default ulimits 4096 (podman's defaults fail
#    with "setrlimit RLIMIT_NOFILE: Operation not permitted": no CAP_SYS_RESOURCE here).
# 3. The base image. No image registry is reachable, so `FROM python:3.11-slim-bookworm` cannot
#    be pulled. A stand-in with the same Debian release and Python minor version is built with
#    debootstrap from the machine's own Debian mirror (read from its apt sources) and imported
#    under that tag. It is a STAND-IN: Debian's python3 (3.11.x) instead of the official image's
#    build; say so wherever a result depends on it. The machine's extra CA certificates are
#    copied in so pip inside `podman build` reaches the package index the same way the host does.
# 4. podman's Docker-compatible API on unix:///run/podman/podman.sock (for docker-compose and the
#    `docker` Python SDK). Started in the background once; its PID is in /run/podman/service.pid.
# Notes: build with `--format docker` or HEALTHCHECK is dropped (OCI format). One-off
# `docker-compose run` of a service that `links` to a running one fails on podman ("link is not
# supported"); dockerd (apt docker.io, `dockerd --storage-driver vfs`) runs it, at the cost of a
# full image copy per container.
set -euo pipefail
BASE_TAG=${BASE_TAG:-docker.io/library/python:3.11-slim-bookworm}
SOCK=/run/podman/podman.sock
log() { echo "container-engine: $*"; }

[ "$(id -u)" = 0 ] || { echo "container-engine: run as root" >&2; exit 2; }
export DEBIAN_FRONTEND=noninteractive
need=()
for p in podman runc docker-compose debootstrap; do command -v "$p" >/dev/null || need+=("$p"); done
dpkg -s uidmap >/dev/null 2>&1 || need+=(uidmap)
dpkg -s fuse-overlayfs >/dev/null 2>&1 || need+=(fuse-overlayfs)
# Added here: without CNI's dnsname plugin podman's networks have no DNS (dns_enabled: false), so
# Compose services cannot reach each other by name (`run --rm agent` -> http://mcp:8000/mcp).
[ -x /usr/lib/cni/dnsname ] || need+=(golang-github-containernetworking-plugin-dnsname)
if ((${#need[@]})); then
  log "installing ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p /etc/containers
if ! grep -q '^runtime = "runc"' /etc/containers/containers.conf 2>/dev/null; then
  cat >/etc/containers/containers.conf <<'CONF'
# container-engine.sh: crun refuses this machine's hybrid cgroups; no CAP_SYS_RESOURCE for ulimits.
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
CONF
fi

if ! podman image exists "$BASE_TAG"; then
  mirror=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1 | awk '{print $2}')
  [ -n "$mirror" ] || mirror=$(grep -hoE '^deb +[^ ]+' /etc/apt/sources.list 2>/dev/null | head -n 1 | awk '{print $2}')
  [ -n "$mirror" ] || { echo "container-engine: no Debian mirror in the apt sources" >&2; exit 1; }
  suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
  root=$(mktemp -d /var/tmp/ingot-base.XXXXXX)
  trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
  log "building the $BASE_TAG stand-in ($suite, Debian's python3) with debootstrap"
  debootstrap --variant=minbase --include=ca-certificates "$suite" "$root" "$mirror" >/dev/null
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount --bind /proc "$root/proc"
  chroot "$root" sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-pip python3-venv python-is-python3 >/dev/null && update-ca-certificates >/dev/null && rm -f /usr/lib/python3.*/EXTERNALLY-MANAGED && apt-get clean && rm -rf /var/lib/apt/lists/*'
  umount "$root/proc"
  tar -C "$root" -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$BASE_TAG" >/dev/null
  log "imported $BASE_TAG (stand-in)"
fi

if ! curl -s --unix-socket "$SOCK" http://d/_ping 2>/dev/null | grep -q OK; then
  mkdir -p /run/podman
  # Started from / : the service outlives this shell, and the conmon it spawns for every container
  # inherits its working folder. Started inside a checkout that is later deleted (a CI clone),
  # every container start fails with "write child: broken pipe" ("[conmon:e] Failed to get
  # working directory" in the service log).
  setsid env -C / podman system service --time=0 "unix://$SOCK" >/run/podman/service.log 2>&1 < /dev/null &
  echo $! >/run/podman/service.pid
  for _ in $(seq 1 50); do curl -s --unix-socket "$SOCK" http://d/_ping 2>/dev/null | grep -q OK && break; sleep 0.2; done
fi
curl -s --unix-socket "$SOCK" http://d/_ping | grep -q OK || { echo "container-engine: the podman API did not come up (see /run/podman/service.log)" >&2; exit 1; }
log "ready: export DOCKER_HOST=unix://$SOCK   (podman $(podman --version | awk '{print $3}'), docker-compose $(docker-compose version --short 2>/dev/null))"
