#!/usr/bin/env bash
# tests/live-systemd/harness.sh: a throw-away systemd (system manager as PID 1 of private
# namespaces, plus root's `systemd --user`) for the live service tests (tests/it/live_systemd/),
# on a machine whose own PID 1 is not systemd (a container, a CI runner).
#
#   harness.sh check                       exit 0 if it can run here, else print why and exit 1
#   harness.sh up  [--bind DIR]...         boot; print "ready <host pid of PID 1> <state dir>
#                                          <cgroup>"; stay until stdin closes or SIGTERM; tear
#                                          down; print "down"
#   harness.sh run [--bind DIR]... -- CMD  boot, run CMD inside (as root, cwd /), tear down;
#                                          exit with CMD's status (125: the harness failed)
#
# What it builds, and what it leaves: one cgroup of its own under the host's cgroup2 mount and a
# state dir under /tmp, both removed at teardown; nothing else on the host. Inside, / is an overlay
# of the host's / (read-only lower, tmpfs upper: writes vanish at teardown), so the listener's
# files live on overlayfs as in a Docker container; /proc, /sys (read-only), /dev, /run, /tmp are
# the sandbox's own; each --bind DIR is the host's DIR, read-write. The network namespace is the
# host's, so a server the test runs on 127.0.0.1 is reachable from the units. The whole tree dies
# with this script (pdeathsig on every level), even when it is SIGKILLed.
#
# Commands run inside with
#   nsenter -t <pid> -a env XDG_RUNTIME_DIR=/run/user/0 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus CMD
# and must end before teardown (they live in the caller's cgroup, not the sandbox's).
set -uo pipefail

die() { echo "harness: $*" >&2; exit 125; }

# Why this machine cannot run the harness, or nothing.
why_not() {
  [ "$(uname -s)" = Linux ] || { echo "not Linux"; return; }
  [ "$(id -u)" = 0 ] || { echo "needs root (uid $(id -u))"; return; }
  local t
  for t in unshare nsenter setpriv script findmnt mount; do
    command -v "$t" >/dev/null || { echo "missing tool: $t (util-linux)"; return; }
  done
  [ -x /lib/systemd/systemd ] || { echo "systemd is not installed (/lib/systemd/systemd)"; return; }
  command -v systemctl >/dev/null || { echo "systemctl is not installed"; return; }
  command -v dbus-daemon >/dev/null || command -v dbus-broker >/dev/null || { echo "no D-Bus daemon (Debian: dbus)"; return; }
  [ -e /usr/lib/systemd/user/dbus.socket ] || { echo "no user D-Bus for systemctl --user (Debian: dbus-user-session)"; return; }
  [ -n "$(findmnt -n -t cgroup2 -o TARGET | head -n1)" ] || { echo "no cgroup2 mount on the host"; return; }
  unshare --mount --pid --fork --cgroup true 2>/dev/null || { echo "unshare of mount/pid/cgroup namespaces is refused (no CAP_SYS_ADMIN?)"; return; }
}

MODE=${1:-}; shift || true
case "$MODE" in
  check) r=$(why_not); [ -z "$r" ] && exit 0; echo "$r"; exit 1 ;;
  up|run) ;;
  *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
BINDS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bind) [ -e "$2" ] || die "no such path to bind: $2"; BINDS+=("$(realpath -e -- "$2")"); shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument $1" ;;
  esac
done
[ "$MODE" = up ] || [ $# -gt 0 ] || die "run needs a command after --"
r=$(why_not); [ -z "$r" ] || die "cannot run here: $r"

CG2=$(findmnt -n -t cgroup2 -o TARGET | head -n1)
OWN_CG=$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)

# What a harness killed with SIGKILL leaves (its namespaces, mounts and processes died with it;
# its trap did not run): an empty cgroup and a state dir. Removed when idle for a minute, and
# never while the sandbox's PID 1 lives.
clean_stale() {
  local cg d pid
  for cg in "$CG2${OWN_CG%/}"/agentchat-live-*; do
    [ -d "$cg" ] && grep -qx 'populated 0' "$cg/cgroup.events" 2>/dev/null || continue
    d=/tmp/agentchat-live.${cg##*/agentchat-live-}
    [ -d "$d" ] && [ -z "$(find "$d" -maxdepth 0 -mmin +1)" ] && continue
    find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  for d in /tmp/agentchat-live.*; do
    [ -d "$d" ] && [ -n "$(find "$d" -maxdepth 0 -mmin +1)" ] || continue
    pid=$(cat "$d/pid" 2>/dev/null)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && continue
    [ -n "$(find "$CG2" -maxdepth 6 -type d -name "agentchat-live-${d##*.}" -print -quit 2>/dev/null)" ] \
      && continue
    rm -rf --one-file-system -- "$d"
  done
}
clean_stale
STATE=$(mktemp -d /tmp/agentchat-live.XXXXXX) || die "mktemp"
CG="$CG2${OWN_CG%/}/agentchat-live-${STATE##*.}"
PID1=""; TOP=""; DONE=0

teardown() {
  [ "$DONE" = 1 ] && return; DONE=1
  local i
  [ -n "${READER:-}" ] && kill "$READER" 2>/dev/null
  if [ -n "$PID1" ] && kill -0 "$PID1" 2>/dev/null; then
    kill -s RTMIN+4 "$PID1" 2>/dev/null                 # systemd: poweroff, every unit stopped
    for i in $(seq 300); do kill -0 "$PID1" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PID1" 2>/dev/null && { echo "harness: PID 1 did not stop in 30 s; SIGKILL" >&2; kill -KILL "$PID1"; }
  fi
  if [ -n "$TOP" ]; then
    for i in $(seq 50); do kill -0 "$TOP" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$TOP" 2>/dev/null; wait "$TOP" 2>/dev/null
  fi
  for i in $(seq 50); do                               # the sandbox's cgroups, leaves first
    [ -d "$CG" ] || break
    find "$CG" -depth -type d -exec rmdir {} + 2>/dev/null; sleep 0.1
  done
  [ -d "$CG" ] && echo "harness: could not remove cgroup $CG" >&2
  if [ "${FAILED:-0}" = 1 ] && [ -s "$STATE/console.log" ]; then
    echo "---- sandbox console (tail) ----" >&2; tail -n 40 "$STATE/console.log" >&2
  fi
  rm -rf --one-file-system -- "$STATE"
}
trap 'teardown' EXIT
trap 'exit 143' TERM HUP
trap 'exit 130' INT

# PID 1 of the new namespaces: builds the root and becomes systemd.
cat > "$STATE/pid1" <<'EOF'
#!/bin/bash
set -euo pipefail
S=$LIVE_STATE
export LIBMOUNT_UTAB="$S/utab"           # else mount(8) would write /run/mount on the host
read -r me _ < /proc/self/stat            # the host's /proc is still mounted: the host pid
echo "$me" > "$S/pid.tmp" && mv "$S/pid.tmp" "$S/pid"
for _ in $(seq 500); do [ -e "$S/moved" ] && break; sleep 0.01; done
mount --make-rprivate /
mkdir -p "$S/fs" && mount -t tmpfs -o mode=700 live "$S/fs"
mkdir -p "$S/fs/upper" "$S/fs/work" "$S/fs/root"
R=$S/fs/root
mount -t overlay live-root -o "lowerdir=/,upperdir=$S/fs/upper,workdir=$S/fs/work" "$R"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
for p in sys sysrq-trigger; do
  [ -e "$R/proc/$p" ] && mount --bind "$R/proc/$p" "$R/proc/$p" && mount -o remount,bind,ro "$R/proc/$p"
done
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=755,nosuid live-dev "$R/dev"
for n in null zero full random urandom tty; do : > "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done
mkdir -p "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5,nosuid,noexec devpts "$R/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev live-shm "$R/dev/shm"
ln -s pts/ptmx "$R/dev/ptmx"; ln -s /proc/self/fd "$R/dev/fd"
for i in 0:stdin 1:stdout 2:stderr; do ln -s "/proc/self/fd/${i%%:*}" "$R/dev/${i#*:}"; done
: > "$R/dev/console"
tty=$(readlink /proc/self/fd/0 || true)   # script(1)'s pty: systemd's console
case "$tty" in /dev/pts/*) mount --bind "$tty" "$R/dev/console" ;; *) mount --bind /dev/null "$R/dev/console" ;; esac
mount -t tmpfs -o mode=755,nosuid,nodev live-run "$R/run"
mount -t tmpfs -o mode=1777,nosuid,nodev live-tmp "$R/tmp"
while IFS= read -r b; do
  [ -n "$b" ] || continue
  if [ -d "$b" ]; then mkdir -p "$R$b"; else mkdir -p "$(dirname "$R$b")"; : > "$R$b"; fi
  mount --bind "$b" "$R$b"
done <<< "$LIVE_BINDS"
E=$R/etc/systemd/system
mkdir -p "$R/etc/systemd/system.conf.d" "$E"
printf '[Manager]\nRuntimeWatchdogSec=0\nRebootWatchdogSec=0\nKExecWatchdogSec=0\nShowStatus=no\n' \
  > "$R/etc/systemd/system.conf.d/live.conf"
# Units that would touch the host's kernel, clock or disks, or need udev: masked.
for u in systemd-tmpfiles-setup systemd-tmpfiles-setup-dev systemd-random-seed systemd-sysusers \
  systemd-firstboot systemd-machine-id-commit systemd-repart systemd-pcrphase systemd-pcrphase-sysinit \
  systemd-binfmt systemd-sysctl systemd-modules-load kmod-static-nodes systemd-pstore \
  systemd-timesyncd systemd-remount-fs systemd-udevd systemd-udev-trigger systemd-udev-settle \
  systemd-hwdb-update ldconfig console-getty; do ln -sf /dev/null "$E/$u.service"; done
for u in systemd-tmpfiles-clean.timer apt-daily-upgrade.timer apt-daily.timer dpkg-db-backup.timer \
  e2scrub_all.timer fstrim.timer man-db.timer proc-sys-fs-binfmt_misc.automount sys-kernel-debug.mount \
  sys-kernel-tracing.mount sys-kernel-config.mount sys-fs-fuse-connections.mount dev-hugepages.mount \
  systemd-journald-audit.socket getty.target systemd-ask-password-console.path; do ln -sf /dev/null "$E/$u"; done
printf '[Unit]\nDescription=agentchat live tests\nRequires=basic.target\nWants=dbus.socket systemd-logind.service user@0.service\nAfter=basic.target systemd-logind.service user@0.service\n' \
  > "$E/agentchat-live.target"
systemd-id128 new > "$R/etc/machine-id"
echo agentchat-live > "$R/etc/hostname"
cd "$R" && mkdir -p .old && pivot_root . .old && cd / && umount -l /.old && rmdir /.old
exec env -i container=agentchat-live TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  setpriv --bounding-set "$LIVE_DROP" -- \
  /lib/systemd/systemd --unit=agentchat-live.target --show-status=no --log-color=no
EOF
chmod 700 "$STATE/pid1"

mkdir "$CG" || die "cannot create cgroup $CG"
# Capabilities the sandbox never needs: the kernel's modules, clock, raw I/O, audit, devices.
DROP=-sys_module,-sys_time,-sys_rawio,-sys_pacct,-wake_alarm,-block_suspend,-syslog,-mac_admin,-mac_override,-audit_control,-audit_read,-linux_immutable,-perfmon,-mknod,-net_admin
BIND_LIST=$(printf '%s\n' "${BINDS[@]+"${BINDS[@]}"}")
LIVE_STATE="$STATE" LIVE_CG="$CG" LIVE_DROP="$DROP" LIVE_BINDS="$BIND_LIST" SHELL=/bin/bash \
  setpriv --pdeathsig KILL -- script -qefc \
  'echo $$ > "$LIVE_CG/cgroup.procs" && exec setpriv --pdeathsig KILL -- unshare --pid --mount --uts --ipc --cgroup --fork --kill-child --propagation private "$LIVE_STATE/pid1"' \
  "$STATE/console.log" </dev/null >/dev/null 2>&1 &
TOP=$!

FAILED=1
t0=$(date +%s)
until [ -s "$STATE/pid" ]; do
  kill -0 "$TOP" 2>/dev/null || die "the sandbox's setup failed"
  [ $(( $(date +%s) - t0 )) -lt 60 ] || die "no PID 1 after 60 s"
  sleep 0.02
done
PID1=$(cat "$STATE/pid")
# unshare (the parent of PID 1, outside the new PID namespace) leaves the cgroup that becomes
# systemd's root cgroup: systemd wants it to itself.
parent=$(awk '$1=="PPid:"{print $2}' "/proc/$PID1/status")
[ "$(cat "/proc/$parent/comm" 2>/dev/null)" = unshare ] && echo "$parent" > "$CG2${OWN_CG%/}/cgroup.procs"
: > "$STATE/moved"
until [ -S "/proc/$PID1/root/run/systemd/private" ]; do
  kill -0 "$PID1" 2>/dev/null || die "systemd exited while starting"
  [ $(( $(date +%s) - t0 )) -lt 60 ] || die "systemd not up after 60 s"
  sleep 0.02
done
INSIDE=(nsenter -t "$PID1" -a env XDG_RUNTIME_DIR=/run/user/0 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus SYSTEMD_PAGER=cat)
state=$(timeout 60 "${INSIDE[@]}" systemctl is-system-running --wait 2>/dev/null)
case "$state" in
  running) ;;
  degraded) echo "harness: system degraded: $(timeout 10 "${INSIDE[@]}" systemctl --failed --no-legend --plain | tr '\n' ' ')" >&2 ;;
  *) die "system manager not running (state '${state:-?}')" ;;
esac
ustate=$(timeout 30 "${INSIDE[@]}" systemctl --user is-system-running --wait 2>/dev/null)
[ "$ustate" = running ] || [ "$ustate" = degraded ] || die "user manager not running (state '${ustate:-?}')"
FAILED=0

if [ "$MODE" = up ]; then
  echo "ready $PID1 $STATE $CG"
  exec 3<&0
  cat <&3 >/dev/null 3<&- &                            # until the caller closes our stdin
  READER=$!
  wait "$READER" 2>/dev/null
  teardown
  echo down
  exit 0
fi
"${INSIDE[@]}" "$@"
rc=$?
teardown
exit $rc
