"""The members of a tar file, from its 512-byte headers only: name, data offset, size.

Plain ustar/v7 headers (what WebDataset writers and ``tar`` produce for
short ASCII/UTF-8 names) are read here directly: the name, size and
checksum fields and nothing else, several times faster than `tarfile`
(measured in docs/formats.md). Anything else (pax or GNU long-name
headers, base-256 sizes, a checksum that does not match) sends the whole
file to `tarfile`, the reference, which also names damage precisely.
"""

from __future__ import annotations

import os
import tarfile

from ._shard_files import ShardFormatError

__all__ = ["tar_members"]

_BLOCK = tarfile.BLOCKSIZE
_SPECIAL = frozenset(b"xgLKSNVM")  # pax, GNU long names, sparse, multi-volume: tarfile reads those
_REGULAR = frozenset(b"07\0")  # regular file, contiguous file, old regular file


class _NotPlain(Exception):
    """A header this module does not read itself: read the file with `tarfile` instead."""


def _octal(field: bytes) -> int:
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text or b"0", 8)
    except ValueError:
        raise _NotPlain from None


def _plain_members(f, end: int) -> list[tuple[str, int, int, bool]]:
    members = []
    pos = 0
    while pos + _BLOCK <= end:
        f.seek(pos)
        block = f.read(_BLOCK)
        if not block.strip(b"\0"):  # the end-of-archive marker
            return members
        kind = block[156]
        if kind in _SPECIAL or block[124] & 0x80:
            raise _NotPlain
        if _octal(block[148:156]) != sum(block) - sum(block[148:156]) + 8 * 32:  # the checksum field counts as spaces
            raise _NotPlain
        raw = block[:100].split(b"\0", 1)[0]
        if block[257:263] == b"ustar\x00" and block[345]:  # POSIX ustar: a prefix holds the start of a long path
            raw = block[345:500].split(b"\0", 1)[0] + b"/" + raw
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _NotPlain from None
        size = _octal(block[124:136])
        regular = kind in _REGULAR and not (kind == 0 and name.endswith("/"))  # old tars mark folders by a slash
        members.append((name, pos + _BLOCK, size, regular))
        pos += _BLOCK + -(-size // _BLOCK) * _BLOCK
    f.seek(pos)
    if f.read(_BLOCK).strip(b"\0"):  # a partial header at the end
        raise _NotPlain
    return members


def _tarfile_members(f, name: str, end: int) -> list[tuple[str, int, int, bool]]:
    f.seek(0)
    members = []
    try:
        tar = tarfile.open(fileobj=f, mode="r:")
    except tarfile.ReadError as e:
        raise ShardFormatError(f"{name}: not a tar file ({e}); from_webdataset() reads uncompressed .tar shards") from e
    with tar:
        while True:
            try:
                member = tar.next()
            except tarfile.TarError as e:
                raise ShardFormatError(f"{name}: tar header of member {len(members)} (byte {tar.offset}) is damaged: {e}") from e
            if member is None:
                break
            tar.members.clear()  # the caller keeps its own compact copy
            members.append((member.name, member.offset_data, member.size, member.isreg()))
        stop = tar.offset
    # tarfile ends quietly at a header it cannot parse; only zero blocks (or nothing) may follow the last member.
    f.seek(stop)
    if f.read(_BLOCK).strip(b"\0"):
        raise ShardFormatError(
            f"{name}: tar header of member {len(members)} (byte {stop}) is damaged: the members after it cannot be read; "
            "re-create or re-download the shard"
        )
    return members


def tar_members(f, name: str) -> list[tuple[str, int, int, bool]]:
    """``[(member name, data offset, size, is a regular file), ...]`` of the tar file ``f``, in order.

    Raises:
        ShardFormatError: not a tar, a damaged header, or a member whose data
            runs past the end of the file; the message names ``name``, the
            member's number and its byte offset.
    """
    end = f.seek(0, os.SEEK_END)
    try:
        members = _plain_members(f, end)
    except _NotPlain:
        members = _tarfile_members(f, name, end)
    for number, (member, offset, size, _) in enumerate(members):
        if offset + size > end:
            raise ShardFormatError(
                f"{name}: member {number} ({member!r}) is cut short: its {size} bytes from byte {offset} run past "
                f"the end of the file ({end} bytes); the shard was truncated"
            )
    return members
