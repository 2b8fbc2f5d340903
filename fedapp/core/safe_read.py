"""Read a run's files only as what they claim to be: a regular file inside its folder, sized first.

Checkpoints, client state, cached models, model.npz and metrics.jsonl are read through here. A
path is refused (``UnsafeFile``, a ValueError whose one line names the file and why) when it is
not a regular file (a FIFO would block the reader forever, a device file would be read until the
kernel kills the process), when it or a link on the way leads out of its folder, or when it is
larger than the reader's limit. The file is opened non-blocking, without becoming a controlling
terminal, and checked again on the open descriptor, so a swap between the check and the open is
caught too.

An ``.npz`` is a zip archive: before any member is read, every member is checked from the
archive's directory (one ``.npy`` per name, no duplicates, no path outside the archive, stored or
deflated, declared sizes within the file's limit and a compression ratio numpy's own writer
could produce; the members, end to end, fill the archive up to its directory), then each
member's ``.npy`` header (no objects, a shape whose bytes are exactly the member's declared
size; a deflated member's header is the only part decompressed before this). Only then is an
array read, and never more than declared.
"""

from __future__ import annotations

import io
import math
import os
import stat
import struct
import zipfile
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

NPZ_LIMIT = 4 << 30  # bytes: far above any model fedapp trains, far below what would exhaust a host
TEXT_LIMIT = 1 << 30  # metrics.jsonl: about a million rows
MAX_RATIO = 200  # a deflated member may declare at most this many bytes per stored byte
MAX_MEMBERS = 100_000
HEADER_LIMIT = 10_000  # numpy's own default for an .npy header

KINDS = {
    stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a link",
}  # fmt: skip


class UnsafeFile(ValueError):
    """A file that is not what its reader expects; the message names it and why."""

    def __init__(self, path: str | Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path, self.why = Path(path), why


def _kind(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: str | Path, root: str | Path, limit: int) -> io.BufferedReader:
    """``path`` opened for reading, if it is a regular file of at most ``limit`` bytes whose real
    location (every link followed) is inside ``root``'s. FileNotFoundError if nothing is there."""
    path, root = Path(path), Path(root)
    try:
        real = os.path.realpath(path, strict=True)
        base = os.path.realpath(root, strict=True)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise UnsafeFile(path, "is a link to nothing (dangling)") from None
        raise
    except OSError as err:
        raise UnsafeFile(path, f"cannot be resolved ({err.strerror or err}: a link loop?)") from None
    if os.path.commonpath([real, base]) != base or real == base:
        raise UnsafeFile(path, f"leads out of {root} (to {real})")
    before = os.stat(real)
    if not stat.S_ISREG(before.st_mode):
        raise UnsafeFile(path, f"is {_kind(before.st_mode)}, not a regular file")
    if before.st_size > limit:
        raise UnsafeFile(path, f"is {before.st_size} bytes, over the {limit}-byte limit for this file")
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise UnsafeFile(path, "was replaced while it was being opened")
        if now.st_size > limit:
            raise UnsafeFile(path, f"is {now.st_size} bytes, over the {limit}-byte limit for this file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_text(path: str | Path, root: str | Path, limit: int = TEXT_LIMIT) -> str:
    """A text file's contents (undecodable bytes replaced), read only as ``open_regular`` allows."""
    with open_regular(path, root, limit) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(path, f"grew past the {limit}-byte limit while it was read")
    return data.decode("utf-8", errors="replace")


def read_npz(path: str | Path, root: str | Path, limit: int = NPZ_LIMIT) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive, its members checked (``check_members``) before any is read."""
    with open_regular(path, root, limit) as fh:
        try:
            archive = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as err:
            raise UnsafeFile(path, f"is not an .npz archive ({err})") from None
        with archive:
            infos = check_members(path, archive, limit)
            check_layout(path, fh, archive, infos)
            try:
                return {info.filename.removesuffix(".npy"): read_member(path, archive, info) for info in infos}
            except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as err:
                if isinstance(err, UnsafeFile):
                    raise
                raise UnsafeFile(path, f"holds a damaged member ({type(err).__name__}: {err})") from None


def check_members(path: str | Path, archive: zipfile.ZipFile, limit: int) -> list[zipfile.ZipInfo]:
    """The archive's members, if each is one uniquely named ``.npy`` that numpy's writer could
    have produced: checked from the archive's directory alone, nothing decompressed."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise UnsafeFile(path, f"has {len(infos)} members, over the limit of {MAX_MEMBERS}")
    seen: set[str] = set()
    total = 0
    for info in infos:
        name = info.filename
        shown = repr(name[:80])
        if name in seen:
            raise UnsafeFile(path, f"holds member {shown} twice")
        seen.add(name)
        if not name.endswith(".npy") or name.startswith("/") or "\\" in name or "\x00" in name or ".." in name.split("/"):
            raise UnsafeFile(path, f"holds member {shown}, not an array entry (<name>.npy inside the archive)")
        if info.is_dir():
            raise UnsafeFile(path, f"holds member {shown} as a folder")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size:
                raise UnsafeFile(path, f"member {shown} is stored uncompressed but declares {info.file_size} bytes in {info.compress_size}")
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            if info.file_size > MAX_RATIO * max(info.compress_size, 1):
                ratio = info.file_size / max(info.compress_size, 1)
                raise UnsafeFile(path, f"member {shown} declares a compression ratio of {ratio:.0f}, over {MAX_RATIO}")
        else:
            raise UnsafeFile(path, f"member {shown} uses compression method {info.compress_type}, not stored or deflated")
        total += info.file_size
        if total > limit:
            raise UnsafeFile(path, f"declares more than {limit} bytes of members (the limit for this file)")
    return infos


def check_layout(path: str | Path, fh: io.BufferedReader, archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> None:
    """The members' local headers and data fill the archive up to its directory with no gap, as
    numpy's writer leaves them: a member the directory does not list (a damaged directory hiding
    it, or bytes put there by something else) is refused. Reads only the fixed-size local headers."""
    at = 0
    for info in sorted(infos, key=lambda i: i.header_offset):
        if info.header_offset != at:
            raise UnsafeFile(path, f"has {abs(info.header_offset - at)} unlisted bytes before member {info.filename[:80]!r}")
        if info.flag_bits & 0x8:
            raise UnsafeFile(path, f"member {info.filename[:80]!r} has a trailing data descriptor, which numpy's writer never writes")
        fh.seek(at)
        head = fh.read(30)
        if len(head) != 30 or head[:4] != b"PK\x03\x04":
            raise UnsafeFile(path, f"member {info.filename[:80]!r} has no local header where the directory says")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        at += 30 + name_len + extra_len + info.compress_size
    start = getattr(archive, "start_dir", at)
    if start != at:
        raise UnsafeFile(path, f"has {abs(start - at)} unlisted bytes before its directory")


def read_member(path: str | Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One member's array, its ``.npy`` header checked against the member's declared size first."""
    shown = repr(info.filename[:80])
    with archive.open(info) as fh:
        version = npy.read_magic(fh)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise UnsafeFile(path, f"member {shown} has .npy format version {version}")
        read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = read_header(fh, max_header_size=HEADER_LIMIT)
        if dtype.hasobject:
            raise UnsafeFile(path, f"member {shown} holds Python objects")
        need = math.prod(shape) * dtype.itemsize
        have = info.file_size - fh.tell()
        if need != have:
            raise UnsafeFile(path, f"member {shown} declares {dtype}{list(shape)} ({need} bytes) in {have} bytes")
        data = fh.read(need)
    if len(data) != need:
        raise UnsafeFile(path, f"member {shown} is truncated ({len(data)} of {need} bytes)")
    flat = np.frombuffer(data, dtype=dtype)
    return flat.reshape(shape, order="F").copy(order="F") if fortran else flat.reshape(shape).copy()
