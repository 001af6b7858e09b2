#!/usr/bin/env bash
# Build the Docker image the tests run jobs in, without any registry.
#
# Usage: scripts/build_test_image.sh SOCKET [TAG]
#   SOCKET  unix socket of the Docker daemon (e.g. from scripts/dockerd.sh)
#   TAG     image tag (default: schedulearn-test:latest)
# Environment:
#   VENV      venv the containers will use (default: <repo>/.venv)
#   REBUILD=1 rebuild even if TAG exists
#
# How it works: the image holds NO Python. Test containers bind-mount the
# host's venv read-only at the same path, plus the base interpreter it links
# to (here /root/.pyenv, since the venv's python is a symlink into pyenv), and
# run with network_mode=host, e.g.
#   docker run --rm --network host -v /work/main/.venv:/work/main/.venv:ro \
#       -v /root/.pyenv:/root/.pyenv:ro schedulearn-test:latest \
#       /work/main/.venv/bin/python -c "import torch; print(torch.__version__)"
# So the image only needs what those mounted files need from the OS: the
# shared libraries (glibc, libstdc++, libz, libssl, ... and the dynamic
# loader) that `ldd` reports for the interpreter, its stdlib extension
# modules and every .so in the venv, plus a shell and a few coreutils (for
# sh -c / horovodrun) and a minimal /etc. These files are copied (symlinks
# resolved) to the same paths in a rootfs, keeping the host's merged-/usr
# symlinks (/bin -> usr/bin, /lib -> usr/lib, ...), and the rootfs is loaded
# with `docker import`. Result: ~30-40 MB, built in a few seconds, no network.
# Bind-mounting the host's /usr and /lib instead would be simpler but would
# hide the image's own files and tie every container to the host's /usr.
#
# Rebuild (REBUILD=1) after installing packages with new native libraries
# into the venv. Idempotent: does nothing when TAG already exists.
set -euo pipefail

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 SOCKET [TAG]" >&2; exit 2; }
SOCKET=$1
TAG=${2:-schedulearn-test:latest}
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV=${VENV:-$REPO_ROOT/.venv}
DOCKER=(docker -H "unix://$SOCKET")

if [ "${REBUILD:-0}" != 1 ] && "${DOCKER[@]}" image inspect "$TAG" >/dev/null 2>&1; then
    echo "==> image $TAG exists (REBUILD=1 to rebuild)"
    exit 0
fi

VPY="$VENV/bin/python"
[ -x "$VPY" ] || { echo "no venv at $VENV (run scripts/setup.sh)" >&2; exit 1; }
VENV=$(cd "$VENV" && pwd)
BASE=$("$VPY" -c 'import sys; print(sys.base_prefix)')
PYEXE=$(readlink -f "$VPY")
STDLIB=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["platstdlib"])')

echo "==> building $TAG for venv $VENV (interpreter $PYEXE)"
ROOTFS=$(mktemp -d)
trap 'rm -rf "$ROOTFS"' EXIT

# Programs from the host to include; the shell is needed for `sh -c` style
# commands, the rest is convenience for debugging and launcher scripts.
TOOLS=(sh bash env cat ls mkdir rm cp mv ln sleep true false id hostname
       uname echo head tail grep sed ps kill nproc which)
# Horovod across Docker hosts starts the remote workers over ssh (docs/docker.md): the image
# gets sshd and ssh when the host has them (openssh-server, scripts/setup.sh), with a throw-away
# host key and a root key pair generated here (test containers only: never reuse these keys).
SSHD=""
if [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then
    SSHD=/usr/sbin/sshd
    TOOLS+=("$SSHD" ssh)
fi
bins=()
for t in "${TOOLS[@]}"; do
    p=$(command -v "$t" 2>/dev/null || true)
    case "$p" in /*) bins+=("$p") ;; esac
done

# All ELF objects whose library dependencies the image must satisfy.
mapfile -t objs < <(
    printf '%s\n' "$PYEXE" "${bins[@]}"
    find "$BASE/lib" "$STDLIB/lib-dynload" "$VENV" -name '*.so*' -type f 2>/dev/null
)

# Resolve dependencies with ldd; keep those outside the mounted trees.
mapfile -t libs < <(
    for o in "${objs[@]}"; do ldd "$o" 2>/dev/null || true; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' |
    sort -u | grep -v -e "^$VENV/" -e "^$BASE/" || true
)

copy() {  # copy PATH to the same (directory-canonical) path in the rootfs
    local dir
    dir=$(readlink -f "$(dirname "$1")")
    mkdir -p "$ROOTFS$dir"
    cp -L "$1" "$ROOTFS$dir/$(basename "$1")"
}
for f in "${libs[@]}" "${bins[@]}"; do copy "$f"; done

# Mirror the host's merged-/usr layout (/bin -> usr/bin etc.).
for d in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$d" ]; then
        ln -sfn "$(readlink "/$d")" "$ROOTFS/$d"
    fi
done
mkdir -p "$ROOTFS"/{etc,tmp,root,proc,sys,dev,run,home} "$ROOTFS$VENV" "$ROOTFS$BASE"
chmod 1777 "$ROOTFS/tmp"
cat > "$ROOTFS/etc/passwd" <<EOF
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat > "$ROOTFS/etc/group" <<EOF
root:x:0:
nogroup:x:65534:
EOF
if [ "$(id -u)" != 0 ]; then
    echo "$(id -un):x:$(id -u):$(id -g)::/tmp:/bin/sh" >> "$ROOTFS/etc/passwd"
    echo "$(id -gn):x:$(id -g):" >> "$ROOTFS/etc/group"
fi
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$ROOTFS/etc/nsswitch.conf"
if [ -n "$SSHD" ]; then
    echo "sshd:x:100:65534::/run/sshd:/bin/false" >> "$ROOTFS/etc/passwd"
    mkdir -p "$ROOTFS/etc/ssh" "$ROOTFS/run/sshd" "$ROOTFS/root/.ssh"
    chmod 755 "$ROOTFS/run/sshd"
    chmod 700 "$ROOTFS/root/.ssh"
    ssh-keygen -q -t ed25519 -N "" -C schedulearn-test-host -f "$ROOTFS/etc/ssh/ssh_host_ed25519_key"
    ssh-keygen -q -t ed25519 -N "" -C schedulearn-test -f "$ROOTFS/root/.ssh/id_ed25519"
    cp "$ROOTFS/root/.ssh/id_ed25519.pub" "$ROOTFS/root/.ssh/authorized_keys"
    printf '%s\n' "HostKey /etc/ssh/ssh_host_ed25519_key" "PermitRootLogin prohibit-password" \
        "PasswordAuthentication no" "KbdInteractiveAuthentication no" "UsePAM no" "StrictModes no" \
        "PidFile none" > "$ROOTFS/etc/ssh/sshd_config"
    printf '%s\n' "Host *" "    StrictHostKeyChecking no" "    UserKnownHostsFile /dev/null" \
        "    LogLevel ERROR" > "$ROOTFS/root/.ssh/config"
    chmod 600 "$ROOTFS/root/.ssh/"*
fi

echo "    $(echo "${libs[@]}" | wc -w) libraries, $(du -sh "$ROOTFS" | cut -f1) rootfs"
tar -C "$ROOTFS" --numeric-owner -cf - . |
    "${DOCKER[@]}" import \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'CMD ["/bin/sh"]' \
        -m "schedulearn test image for $VENV" - "$TAG" >/dev/null

# Smoke test: the venv's torch must import inside a container.
MOUNT_BASE=$BASE
case "$BASE" in "$HOME"/.pyenv/*) MOUNT_BASE="$HOME/.pyenv" ;; esac
echo "==> verifying $TAG (docker run ... python -c 'import torch')"
"${DOCKER[@]}" run --rm --network host \
    -v "$VENV:$VENV:ro" -v "$MOUNT_BASE:$MOUNT_BASE:ro" "$TAG" \
    "$VENV/bin/python" -c 'import torch; print("    torch", torch.__version__, "OK")'
echo "==> built $TAG"
