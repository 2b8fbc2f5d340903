"""Run the fleet's device processes from the images `scripts/images.sh` built, not from the
host's installation: the SuperLink (+ proxy) from ``fedapp-superlink:TAG`` and each SuperNode
(and every ClientApp it starts) from its own working container of ``fedapp-supernode:TAG``.

Each image is a buildah working container named ``<prefix>link-img`` / ``<prefix>n<i>-img``
(so `fedapp fleet clean` finds it by the fleet's prefix), mounted read-write. A process enters
it through ``unshare --mount`` + ``chroot``: in its own private mount namespace it binds the
fleet's work folder (TLS material, keys, state) and the run folders at their host paths, plus
/proc, /dev and /sys, then chroots into the image. The binds live and die with that mount
namespace, so nothing is left mounted on the host when the process ends; the network namespace
and cgroup it was started in are kept. The operator's tools (`flwr run`, registration, the
link probe) stay on the host, as they would on an operator's machine.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from fedapp.fleet import FleetError

IMAGE = "localhost/fedapp-{target}:{tag}"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ENTER = (
    'set -e; r=$1; n=$2; shift 2; while [ "$n" -gt 0 ]; do mkdir -p "$r$1"; mount --rbind "$1" "$r$1"; shift; n=$((n-1)); done; '
    'for d in proc dev sys; do mkdir -p "$r/$d"; done; mount -t proc proc "$r/proc"; mount --rbind /dev "$r/dev"; '
    'mount --rbind /sys "$r/sys"; exec chroot "$r" "$@"'
)


def _buildah(*argv: str, timeout: float = 600) -> str:
    proc = subprocess.run(["buildah", *argv], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise FleetError(f"buildah {' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def unavailable(tag: str) -> str | None:
    """Why ``--images TAG`` cannot work here (None: it can)."""
    if shutil.which("buildah") is None:
        return "fedapp fleet --images needs buildah (the images are built by scripts/images.sh)"
    for target in ("superlink", "supernode"):
        image = IMAGE.format(target=target, tag=tag)
        if subprocess.run(["buildah", "inspect", "--type", "image", image], capture_output=True, timeout=120).returncode != 0:
            return f"--images {tag}: image {image} not found (build it with scripts/images.sh --tag {tag})"
    return None


def container(name: str, target: str, tag: str) -> Path:
    """A working container ``name`` of the ``target`` image, mounted; returns its root folder."""
    _buildah("from", "--name", name, "--pull-never", IMAGE.format(target=target, tag=tag))
    return Path(_buildah("mount", name))


def containers(prefix: str) -> list[str]:
    """The fleet's working containers (by name), for cleaning up."""
    if shutil.which("buildah") is None:
        return []
    out = subprocess.run(["buildah", "containers", "--json"], capture_output=True, text=True, timeout=120).stdout
    try:
        listed = json.loads(out or "[]") or []
    except ValueError:
        return []
    return sorted(c["containername"] for c in listed if str(c.get("containername", "")).startswith(prefix))


def remove(prefix: str) -> None:
    for name in containers(prefix):
        subprocess.run(["buildah", "umount", name], capture_output=True, timeout=120)
        subprocess.run(["buildah", "rm", name], capture_output=True, timeout=120)


def in_image(argv: Sequence[str]) -> list[str]:
    """``argv`` as the image runs it: this interpreter becomes the image's ``python3``, a host
    executable path (flower-supernode beside this venv's python) the image's one on its PATH."""
    head = argv[0]
    if head == sys.executable:
        head = "python3"
    elif "/" in head:
        head = Path(head).name
    return [head, *argv[1:]]


def enter(root: Path, binds: Sequence[Path], argv: Sequence[str]) -> list[str]:
    """The command that runs ``argv`` (already as the image runs it) chrooted in ``root`` with
    ``binds`` visible at their host paths, all mounts private to the process."""
    for b in binds:
        if not Path(b).is_absolute():
            raise FleetError(f"bind {shlex.quote(str(b))} must be an absolute path")
    head = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _ENTER, "enter"]
    return [*head, str(root), str(len(binds)), *map(str, binds), *argv]


def image_env(env: dict[str, str]) -> dict[str, str]:
    """The host environment minus what points into the host's installation."""
    out = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    out["PATH"] = PATH
    return out
