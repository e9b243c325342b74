"""A compressed dump decompressed in the workers (issue 37 #3): a multi-stream .bz2 split at its
stream boundaries (a multi-frame .zst at its frames), each worker given a run of whole streams.

Why: gzip and bzip2 cannot seek, so a compressed file read by one process is decompressed by
that process alone, and decompression costs as much as parsing. Wikidata's
``latest-all.json.bz2`` is written by a parallel bzip2: a concatenation of many independent
streams, each of which decompresses on its own. A stream starts with ``BZh1``–``BZh9`` and the
block magic ``1AY&SY`` (0x314159265359), byte-aligned; the stream before it ends with the
end-of-stream magic 0x177245385090 and a 32-bit CRC, padded with zero bits to the byte. The
scan here takes a candidate only where both are found (a false match inside compressed data is
then about 1 in 2**128), and the worker verifies each boundary by decompressing: its streams
must end exactly where the next run starts, or the load stops with one line. A .zst needs no
search: its frames are walked by their headers, which give every block's size (`zst_frame_starts`).

Which lines a run parses is decided as for byte ranges of a plain file: a run owns the lines
that *start* in its text; every run but the first skips its text up to its first newline (the
end of a line its predecessor owns), and reads on into the following streams to finish its last
line. The runs' texts therefore tile the file's text exactly, whatever the stream boundaries.
"""

from __future__ import annotations

import bz2
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from kgprobe.errors import InputError
from kgprobe.loaders.common import ZstdFrame

#: the byte-aligned start of a bzip2 stream's first block (after ``BZh`` and the level digit)
BLOCK_MAGIC = b"1AY&SY"
#: the end-of-stream magic of the stream before a boundary (48 bits, not byte-aligned)
EOS_MAGIC = 0x177245385090
#: how far into a .bz2 file a second stream is looked for before it is called single-stream
PROBE_BYTES = 64 << 20
_READ = 8 << 20
#: compressed bytes read at a time for the end of a run's last line: little more than the next
#: stream's first block is decompressed twice (a MiB at a time decompressed a whole run twice)
_TAIL_READ = 32 << 10


class Run(NamedTuple):
    """Whole compressed streams: bytes ``start`` to ``end`` of the file as stored."""

    start: int
    end: int


def _ends_a_stream(tail: bytes) -> bool:
    """Whether ``tail`` (the 11 bytes before a candidate) ends with a bzip2 end-of-stream:
    the 48-bit magic, a 32-bit CRC, then 0-7 zero bits of padding."""
    if len(tail) < 11:
        return False
    value = int.from_bytes(tail, "big")
    for pad in range(8):
        if value & ((1 << pad) - 1) == 0 and (value >> (pad + 32)) & ((1 << 48) - 1) == EOS_MAGIC:
            return True
    return False


def bz2_stream_starts(fh: BinaryIO, limit: int | None = None) -> Iterator[int]:
    """The byte offsets where the streams of a .bz2 file start (0 first), in order; with
    ``limit``, only those before it."""
    fh.seek(0)
    if fh.read(3) != b"BZh":
        return
    yield 0
    pos = 0  # file offset of ``buf[0]``
    buf = b""
    fh.seek(0)
    while limit is None or pos < limit:
        more = fh.read(_READ)
        if not more:
            return
        keep = len(buf)
        buf += more
        at = max(keep - 16, 0)
        while (hit := buf.find(BLOCK_MAGIC, at)) >= 0:
            start = hit - 4
            at = hit + 1
            if start < 11 or buf[start:start + 3] != b"BZh" or not 0x31 <= buf[start + 3] <= 0x39:
                continue
            if _ends_a_stream(buf[start - 11:start]):
                if limit is not None and pos + start >= limit:
                    return
                yield pos + start
        cut = max(len(buf) - 32, 0)  # a header split between two reads is found next time
        pos += cut
        buf = buf[cut:]


#: zstd frame magic (0xFD2FB528, little-endian) and that of a skippable frame (its low 4 bits free)
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SKIPPABLE = 0x184D2A50


def zst_frame_starts(fh: BinaryIO, limit: int | None = None) -> Iterator[int]:
    """The byte offsets where the frames of a .zst file start (0 first), in order: walked by
    their headers (RFC 8878: the header's fields, then each block's 3-byte header gives its
    size), so exact, with no search and no false match; with ``limit``, only those before it.
    A skippable frame is part of the frame before it; bytes that are no frame end the walk."""
    fh.seek(0)
    pos = 0
    while limit is None or pos < limit:
        fh.seek(pos)
        head = fh.read(18)
        if len(head) < 4:
            return
        magic = int.from_bytes(head[:4], "little")
        if magic & 0xFFFFFFF0 == _SKIPPABLE:
            if len(head) < 8:
                return
            pos += 8 + int.from_bytes(head[4:8], "little")
            continue
        if head[:4] != ZSTD_MAGIC or len(head) < 5:
            return
        yield pos
        fhd = head[4]
        single = fhd >> 5 & 1
        fcs = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        at = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
        while True:
            fh.seek(at)
            block = fh.read(3)
            if len(block) < 3:
                return
            bh = int.from_bytes(block, "little")
            kind, size = bh >> 1 & 3, bh >> 3
            if kind == 3:
                return
            at += 3 + (1 if kind == 1 else size)
            if bh & 1:
                break
        pos = at + (4 if fhd >> 2 & 1 else 0)


#: how the streams of each splittable compression are found, named and decompressed
_KINDS = {
    "bz2": (bz2_stream_starts, "bzip2 stream"),
    "zst": (zst_frame_starts, "zstd frame"),
}


def unit_name(kind: str) -> str:
    """``bzip2 stream`` or ``zstd frame``: what the file is split at, for messages."""
    return _KINDS[kind][1]


def stream_runs(path: Path, kind: str, target: int, begin: int | None = None) -> Iterator[Run] | None:
    """Runs of whole streams (``kind``: ``bz2`` or ``zst``) of about ``target`` compressed
    bytes each (at least one stream), from the stream at ``begin`` (a resume) or from the
    start; None where the file shows no second stream in its first :data:`PROBE_BYTES`: a
    file written by a plain bzip2 (or zstd) is one stream, which one process must decompress."""
    if begin is None:
        with path.open("rb") as fh:
            probe = list(_KINDS[kind][0](fh, PROBE_BYTES))
        if len(probe) < 2:
            return None
    return _runs(path, kind, target, begin or 0)


def is_stream_start(path: Path, kind: str, at: int) -> bool:
    """Whether byte ``at`` of ``path`` starts a stream (a checkpoint's ``stream``): the
    boundary the scan would take (for .bz2 the header after an end-of-stream marker, for .zst
    a frame's magic). The worker's decompression verifies it further."""
    if at < 0:
        return False
    with path.open("rb") as fh:
        if kind == "zst":
            fh.seek(at)
            return fh.read(4) == ZSTD_MAGIC
        if at == 0:
            return fh.read(3) == b"BZh"
        fh.seek(at - 11)
        data = fh.read(21)
    return (len(data) == 21 and data[11:14] == b"BZh" and data[15:21] == BLOCK_MAGIC
            and _ends_a_stream(data[:11]))


def _runs(path: Path, kind: str, target: int, begin: int) -> Iterator[Run]:
    size = path.stat().st_size
    with path.open("rb") as fh:
        for start in _KINDS[kind][0](fh):
            if start - begin >= target:
                yield Run(begin, start)
                begin = start
    if begin < size:
        yield Run(begin, size)


class RunText(NamedTuple):
    """The text a run owns, and what stopped its decompression (a truncated or corrupt file),
    raised by the reader after the records of the complete lines before it."""

    text: bytes
    error: BaseException | None


def run_text(path: str, kind: str, run: Run, first: int | None) -> RunText:
    """The text that ``run`` of a multi-stream file (``kind``: ``bz2`` or ``zst``) owns: with ``first`` (the first run), its
    text from byte ``first`` on (the lines the main process read already are left out); else
    from after its first newline. Every run that is not the file's last reads on into the
    following streams to the end of its last line."""
    with open(path, "rb") as fh:
        reader = _Streams(fh, run.start, fh.seek(0, 2),
                          bz2.BZ2Decompressor if kind == "bz2" else ZstdFrame)
        parts: list[bytes] = []
        error: BaseException | None = None
        try:
            while reader.pos < run.end:
                parts.append(reader.read(run.end - reader.pos))
        except (OSError, EOFError) as exc:
            error = exc
        whole = b"".join(parts)
        if error is None and reader.truncated:
            error = reader.truncated
        elif error is None and reader.fed:
            raise InputError(f"{path}: byte {run.end:,} looked like the start of a "
                             f"{unit_name(kind)} but is not one; read the file with --workers 1")
        if first is not None and len(whole) < first:
            raise InputError(f"{path}: the first {unit_name(kind)}s are shorter than the dump's "
                             "first line; read the file with --workers 1")
        if first is None:  # the end of a line an earlier run owns comes first
            nl = whole.find(b"\n")
            text = b"" if nl < 0 else whole[nl + 1:]
            if nl < 0 and error is None:
                return RunText(b"", None)  # all of it is the middle of that line
        else:
            text = whole[first:]
        if error is not None:
            return RunText(text[:text.rfind(b"\n") + 1], error)
        tail: list[bytes] = []
        try:
            while reader.pos < reader.size:  # the end of the last line, from the streams after
                piece = reader.read(_TAIL_READ)
                nl = piece.find(b"\n")
                if nl >= 0:
                    tail.append(piece[:nl + 1])
                    break
                tail.append(piece)
            else:
                if reader.truncated:  # the last line's end is missing: not handed on
                    return RunText(text[:text.rfind(b"\n") + 1], reader.truncated)
        except (OSError, EOFError) as exc:
            return RunText(text[:text.rfind(b"\n") + 1], exc)
        return RunText(text + b"".join(tail), None)


class _Streams:
    """Consecutive streams of a file of ``size`` bytes, from byte ``start``, decompressed a
    piece at a time by decompressors made by ``new``; ``pos`` is the compressed byte read up to, ``fed`` whether the stream
    being read began (a run must end where a stream ended)."""

    def __init__(self, fh: BinaryIO, start: int, size: int, new: Callable[[], Any]) -> None:
        fh.seek(start)
        self.new = new
        self.fh = fh
        self.pos = start
        self.size = size
        self.dec = new()
        self.fed = False

    def read(self, most: int) -> bytes:
        """Decompress at most ``most`` more compressed bytes (1 MiB at a time)."""
        data = self.fh.read(max(1, min(most, 1 << 20)))
        self.pos += len(data)
        out: list[bytes] = []
        while data:
            out.append(self.dec.decompress(data))
            self.fed = True
            if self.dec.eof:
                data = self.dec.unused_data
                self.dec = self.new()
                self.fed = False
            else:
                data = b""
        return b"".join(out)

    @property
    def truncated(self) -> EOFError | None:
        """The file ended inside a stream: what the sequential reader raises there."""
        if self.pos >= self.size and self.fed:
            return EOFError("compressed file ended before the end-of-stream marker was reached")
        return None
