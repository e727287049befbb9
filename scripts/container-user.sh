#!/bin/sh
# `ingot` inside the Ingot image (installed as /usr/local/sbin/ingot, ahead of the real console
# script in PATH): run as the user who owns the mounted skills folder, so that what Ingot writes
# (promotions in /app/skills, its state in /app/runs) stays owned by the person who cloned the
# repository, never by root and never world-writable.
#
#   the owner:  INGOT_UID / INGOT_GID if set, else the owner of /app/skills; if that is root
#               (a repository cloned as root), the image's own user 10001.
#   as root:    drop to the owner (setpriv; no capabilities survive the uid change), HOME=/tmp.
#   not root:   (the image's USER, or Compose's `user:`) run as is.
#   --prepare:  (Compose's one-shot `state` step, as root) create /app/runs, /app/optimize/tasks,
#               /app/inbox and /app/team and hand them to the owner; /app/skills too when its
#               owner is root.
set -eu
REAL=/usr/local/bin/ingot

owner() {
  uid=${INGOT_UID:-$(stat -c %u /app/skills)}
  gid=${INGOT_GID:-$(stat -c %g /app/skills)}
  if [ "$uid" = 0 ]; then uid=10001 gid=10001; fi
  echo "$uid:$gid"
}

if [ "${1:-}" = "--prepare" ]; then
  ids=$(owner)
  mkdir -p /app/runs /app/optimize/tasks /app/inbox /app/team
  chown -R "$ids" /app/runs /app/optimize/tasks /app/inbox /app/team
  if [ "$(stat -c %u /app/skills)" = 0 ] && [ -z "${INGOT_UID:-}" ]; then
    chown -R "$ids" /app/skills  # root's own clone: the image's user needs to promote into it
  fi
  echo "ingot: the Ingot services run as $ids (the owner of ./skills, or INGOT_UID / INGOT_GID)"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  exec "$REAL" "$@"
fi
ids=$(owner)
# ssh-keygen (git's signing and verifying) refuses a uid with no passwd entry: give the owner one.
getent passwd "${ids%:*}" >/dev/null || echo "ingot-${ids%:*}:x:${ids%:*}:${ids#*:}:Ingot:/tmp:/usr/sbin/nologin" >>/etc/passwd
exec setpriv --reuid="${ids%:*}" --regid="${ids#*:}" --clear-groups -- env HOME=/tmp "$REAL" "$@"
