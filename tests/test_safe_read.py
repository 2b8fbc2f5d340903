"""Run files are read only as what they claim to be (fedapp.core.safe_read): generated hostile files
by the hundred, each either read back exactly as written or refused with one line naming the file,
never hanging, never reading past the stated limit."""

from __future__ import annotations

import io
import os
import random
import re
import socket
import stat
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedapp.core.safe_read import MAX_RATIO, UnsafeFile, open_regular, read_npz, read_text
from fedapp.core.state import DiskStore, StateError, save_npz_atomic, unkeyed_files

ARRAYS = {"global/w": np.arange(12, dtype=np.float32).reshape(3, 4), "global/b": np.array([1.5, -2.0]), "meta": np.array('{"round": 1}')}


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> bool:
    return set(got) == set(want) and all(got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]) for k in want)


def refused(path: Path, root: Path, needle: str, limit: int = 1 << 20) -> str:
    with pytest.raises(UnsafeFile) as err:
        read_npz(path, root, limit)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and (needle in text or re.search(needle, text)) and "\n" not in text, text
    return text


def test_a_written_archive_reads_back_exactly_and_a_fortran_array_keeps_its_order(tmp_path: Path) -> None:
    arrays = {**ARRAYS, "f": np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)), "empty": np.zeros((0, 3), np.float64)}
    save_npz_atomic(tmp_path / "a.npz", arrays)
    got = read_npz(tmp_path / "a.npz", tmp_path)
    assert same(got, arrays) and got["f"].flags.f_contiguous and got["global/w"].flags.writeable
    assert str(got["meta"]) == '{"round": 1}'


def make_special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("creating a device node needs root")
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("kind", "word"), [("fifo", "a FIFO"), ("folder", "a folder"), ("socket", "a socket"), ("device", "a character device")]
)
def test_a_special_file_is_refused_without_blocking_or_reading(tmp_path: Path, kind: str, word: str) -> None:
    path = tmp_path / "checkpoint.npz"
    make_special(kind, path)
    refused(path, tmp_path, f"is {word}, not a regular file")
    with pytest.raises(UnsafeFile, match=f"is {word}"):
        read_text(path, tmp_path)


@pytest.mark.timeout(60)
def test_links_count_only_where_they_lead_inside_the_folder(tmp_path: Path) -> None:
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    (run / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    save_npz_atomic(run / "sub" / "real.npz", ARRAYS)
    save_npz_atomic(elsewhere / "other.npz", ARRAYS)
    (run / "inside.npz").symlink_to("sub/real.npz")
    assert same(read_npz(run / "inside.npz", run), ARRAYS)
    (run / "out.npz").symlink_to(elsewhere / "other.npz")
    refused(run / "out.npz", run, f"leads out of {run} (to {elsewhere / 'other.npz'})")
    (run / "up.npz").symlink_to("../elsewhere/other.npz")
    refused(run / "up.npz", run, "leads out of")
    (run / "zero.npz").symlink_to("/dev/zero")
    refused(run / "zero.npz", run, "leads out of")
    (run / "dangling.npz").symlink_to("sub/nothing.npz")
    refused(run / "dangling.npz", run, "dangling")
    (run / "a.npz").symlink_to("b.npz")
    (run / "b.npz").symlink_to("a.npz")
    refused(run / "a.npz", run, "cannot be resolved")
    (run / "self.npz").symlink_to(".")
    refused(run / "self.npz", run, "leads out of")  # the folder itself is not a file inside it
    (tmp_path / "linked-run").symlink_to(run)  # a run folder reached through a link is still that folder
    assert same(read_npz(tmp_path / "linked-run" / "inside.npz", tmp_path / "linked-run"), ARRAYS)
    with pytest.raises(FileNotFoundError):
        read_npz(run / "missing.npz", run)


def test_a_file_over_its_limit_is_refused_from_its_size_alone(tmp_path: Path) -> None:
    path = tmp_path / "big.npz"
    with path.open("wb") as fh:
        fh.truncate(19 << 30)  # sparse: a 19 GB file that costs no disk
    refused(path, tmp_path, f"is {19 << 30} bytes, over the {1 << 20}-byte limit")
    with pytest.raises(UnsafeFile, match="over the 100-byte limit"):
        read_text(path, tmp_path, limit=100)
    with open_regular(path, tmp_path, 20 << 30) as fh:
        assert fh.read(4) == b"\0\0\0\0"  # within the limit it is an ordinary file


def test_every_truncation_and_hundreds_of_byte_flips_are_read_exactly_or_refused(tmp_path: Path) -> None:
    data = npz_bytes(ARRAYS)
    path = tmp_path / "c.npz"
    rng = random.Random(37)
    cuts = list(range(0, len(data)))
    flips = [(rng.randrange(len(data)), rng.randrange(1, 256)) for _ in range(600)]
    outcomes = {"exact": 0, "refused": 0}
    blobs = [(f"cut {c}", data[:c]) for c in cuts]
    blobs += [(f"flip {at}^{x}", data[:at] + bytes([data[at] ^ x]) + data[at + 1 :]) for at, x in flips]
    for case, blob in blobs:
        path.write_bytes(blob)
        try:
            got = read_npz(path, tmp_path)
        except UnsafeFile as err:
            assert str(err).startswith(f"{path}: ") and "\n" not in str(err)
            outcomes["refused"] += 1
            continue
        # a flip the format cannot see (a timestamp, a comment length's slack) leaves the arrays as written
        assert same(got, ARRAYS), case
        outcomes["exact"] += 1
    assert outcomes["refused"] >= len(cuts) and sum(outcomes.values()) == len(cuts) + len(flips)


def zip_with(members: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, payload, method in members:
            z.writestr(zipfile.ZipInfo(name), payload, compress_type=method)
    return buf.getvalue()


def npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


GOOD = npy(np.arange(5, dtype=np.float32))


def huge_header() -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    return buf.getvalue() + bytes(20)


HUGE = huge_header()
STORED, DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED


@pytest.mark.parametrize(
    ("members", "needle"),
    [
        ([("a.npy", GOOD, STORED), ("a.npy", GOOD, STORED)], "holds member 'a.npy' twice"),
        ([("a.npy", GOOD, STORED), ("notes.txt", b"hi", STORED)], "'notes.txt', not an array entry"),
        ([("../up.npy", GOOD, STORED)], "'../up.npy', not an array entry"),
        ([("/abs.npy", GOOD, STORED)], "'/abs.npy', not an array entry"),
        ([("x/../../y.npy", GOOD, STORED)], "not an array entry"),
        ([("nul\x00.npy", GOOD, STORED)], "not an array entry"),
        ([("zeros.npy", npy(np.zeros(4 << 20, np.uint8)), DEFLATED)], rf"compression ratio of 10\d\d, over {MAX_RATIO}"),
        ([("b.npy", GOOD, zipfile.ZIP_BZIP2)], "compression method 12"),
        ([("o.npy", npy(np.array([1, None], dtype=object)), STORED)], "holds Python objects"),
        ([("h.npy", GOOD.replace(b"(5,)", b"(9,)"), STORED)], "declares float32[9] (36 bytes) in 20 bytes"),
        ([("h.npy", HUGE, STORED)], r"declares float32\[1000000000000\] \(4000000000000 bytes\) in 20 bytes"),
        ([("h.npy", GOOD.replace(b"(5,)", b"(5.)"), STORED)], "holds a damaged member"),
        ([("v.npy", b"\x93NUMPY\x09\x00" + GOOD[8:], STORED)], r"has .npy format version \(9, 0\)"),
    ],
)
def test_archive_members_are_checked_before_anything_is_decompressed(
    tmp_path: Path, members: list[tuple[str, bytes, int]], needle: str
) -> None:
    path = tmp_path / "m.npz"
    path.write_bytes(zip_with(members))
    refused(path, tmp_path, needle, limit=64 << 20)


def test_declared_sizes_are_bounded_by_the_limit_and_a_lying_stored_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    big = npy(np.random.default_rng(0).integers(0, 4, 300_000, dtype=np.uint8))  # deflates about 4:1, to under the limit
    path.write_bytes(zip_with([("a.npy", big, DEFLATED)]))
    refused(path, tmp_path, "declares more than 100000 bytes of members", limit=100_000)
    assert read_npz(path, tmp_path, limit=1 << 20)["a"].shape == (300_000,)
    data = bytearray(zip_with([("a.npy", GOOD, STORED)]))
    central = data.rindex(b"PK\x01\x02")  # the central directory entry's uncompressed size: 24 bytes in
    data[central + 24 : central + 28] = struct.pack("<I", len(GOOD) * 1000)
    path.write_bytes(bytes(data))
    refused(path, tmp_path, f"stored uncompressed but declares {len(GOOD) * 1000} bytes in {len(GOOD)}")


def test_a_member_the_directory_does_not_list_is_refused(tmp_path: Path) -> None:
    """Bytes between members that no directory entry accounts for (a damaged or doctored directory
    hiding a member) are refused, not skipped: what is read is the whole archive or nothing."""
    data = bytearray(zip_with([("hidden.npy", GOOD, STORED), ("shown.npy", GOOD, STORED)]))
    first, second = data.index(b"PK\x01\x02"), data.rindex(b"PK\x01\x02")
    del data[first:second]  # drop the first member's directory entry, then fix the end record's counts and size
    count, size = struct.unpack("<HI", bytes(data[-12:-10] + data[-10:-6]))
    data[-14:-6] = struct.pack("<HHI", count - 1, count - 1, size - (second - first))
    path = tmp_path / "h.npz"
    path.write_bytes(bytes(data))
    assert zipfile.ZipFile(path).namelist() == ["shown.npy"]  # zipfile alone reads one member and says nothing
    refused(path, tmp_path, f"has {30 + len('hidden.npy') + len(GOOD)} unlisted bytes before member 'shown.npy'")


def test_hundreds_of_generated_archives_are_read_exactly_or_refused(tmp_path: Path) -> None:
    """Random members: names (good, duplicate, odd), methods, payloads (arrays, headers with
    another shape, junk): an archive is read only if every member is a well-formed array."""
    rng = random.Random(7)
    path = tmp_path / "g.npz"
    names = ["a.npy", "b/c.npy", "a.npy", "d", "../e.npy", "f.npy/", "g.npz", "h.npy"]
    read = refusals = 0
    for _ in range(400):
        members: list[tuple[str, bytes, int]] = []
        want: dict[str, np.ndarray] = {}
        clean = True
        for _ in range(rng.randint(1, 4)):
            name = rng.choice(names)
            arr = np.array([rng.random() for _ in range(rng.randint(0, 6))], dtype=rng.choice(["<f4", "<f8", "<i8"]))
            payload = npy(arr)
            twist = rng.random()
            if twist < 0.15:
                payload = payload[: rng.randrange(len(payload))]
                clean = False
            elif twist < 0.25:
                payload = payload.replace(b"'shape': (", b"'shape': (7, ")
                clean = False
            clean = clean and name.endswith(".npy") and not name.startswith("..") and name not in want.keys() | {k + ".npy" for k in want}
            members.append((name, payload, rng.choice([STORED, DEFLATED])))
            want[name.removesuffix(".npy")] = arr
        path.write_bytes(zip_with(members))
        try:
            got = read_npz(path, tmp_path)
        except UnsafeFile as err:
            assert "\n" not in str(err)
            refusals += 1
            continue
        assert clean and same(got, want), members
        read += 1
    assert read > 30 and refusals > 100


@pytest.mark.timeout(60)
def test_a_client_state_file_that_is_not_a_regular_file_is_moved_aside_and_named(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "state")
    store.save(0, "theta", {"w": np.ones(3)})
    store.save(1, "theta", {"w": np.ones(3)})
    os.replace(store.path(1), store.path(1).with_name("kept.npz"))
    os.mkfifo(store.path(1))
    assert unkeyed_files(store.root) == []  # the resume check skips it without blocking
    fifo = r"client state file .*client-1.npz is unreadable \(is a FIFO, not a regular file\); moved to client-1.npz.corrupt"
    with pytest.raises(StateError, match=fifo):
        store.read(1)
    assert store.read(1) == {} and stat.S_ISFIFO(os.lstat(store.path(1).with_name("client-1.npz.corrupt")).st_mode)
    outside = tmp_path / "outside.npz"
    save_npz_atomic(outside, {"theta/w": np.zeros(3)})
    store.path(2).symlink_to(outside)
    with pytest.raises(StateError, match=r"client-2.npz is unreadable \(leads out of"):
        store.load(2, "theta")
    assert outside.exists() and np.array_equal(store.load(0, "theta")["w"], np.ones(3))
