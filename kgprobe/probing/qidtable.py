"""Entity ids of the semantic index as numpy arrays, not Python strings.

At Wikidata's ~100M entities a list of QID strings plus a ``{qid: row}`` dict costs about
150 bytes an entity (a str object, a list slot, a dict entry): 15 GB before a single vector.
Here the ids are one array: ``Q<number>`` ids as int64 numbers (8 bytes an entity) when every id
is one, otherwise fixed-width bytes; lookups are a binary search over a sorted view (an int32
or int64 permutation, absent when the ids are already sorted, as a build's are).

A row (slot) can be emptied (an entity removed by an update): its code becomes the empty
value and it drops out of lookups, so the other rows, and the FAISS ids that are these rows,
never move.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

_QNUM = re.compile(r"Q[1-9][0-9]{0,17}")
#: the code of an emptied row in an int table (QIDs are positive)
_GONE_INT = -1


def _all_qnums(ids: Sequence[str]) -> bool:
    match = _QNUM.fullmatch
    return all(match(q) is not None for q in ids)


class QidTable:
    """Row → id and id → row for the semantic index's entities."""

    def __init__(self, codes: np.ndarray) -> None:
        self.codes = codes
        self._index()

    # construction --------------------------------------------------------------------------

    @classmethod
    def from_ids(cls, ids: Iterable[str]) -> QidTable:
        """A table whose rows are ``ids`` in the order given."""
        ids = ids if isinstance(ids, list) else list(ids)
        if _all_qnums(ids):
            return cls(np.fromiter((int(q[1:]) for q in ids), dtype=np.int64, count=len(ids)))
        return cls(np.asarray([q.encode() for q in ids], dtype=np.bytes_) if ids
                   else np.zeros(0, dtype="S1"))

    @classmethod
    def from_unordered(cls, ids: list[str]) -> QidTable:
        """A table of ``ids`` (duplicates dropped) in QID order: the numbers sorted as an array
        when every id is a ``Q`` number, else the strings by ``(number, id)`` as the graph
        layer orders them."""
        if _all_qnums(ids):
            return cls(np.unique(np.fromiter((int(q[1:]) for q in ids), dtype=np.int64, count=len(ids))))
        from kgprobe.graph.distractors import qid_order

        return cls.from_ids(sorted(set(ids), key=qid_order))

    def _index(self) -> None:
        live = self._live = np.asarray(self.codes != self._gone)
        self.n_live = int(live.sum())
        sorted_live = self.n_live == len(self.codes) and (
            len(self.codes) < 2 or bool(np.all(self.codes[1:] > self.codes[:-1])))
        if sorted_live:
            self.order: np.ndarray | None = None
            self._sorted = self.codes
        else:
            rows = np.flatnonzero(live)
            perm = rows[np.argsort(self.codes[rows], kind="stable")]
            self.order = perm.astype(np.int32 if len(self.codes) < 2**31 else np.int64)
            self._sorted = self.codes[self.order]
            if len(self._sorted) > 1 and not bool(np.all(self._sorted[1:] > self._sorted[:-1])):
                from kgprobe.errors import ConfigError

                raise ConfigError("duplicate entity ids in the semantic index input")

    @property
    def is_int(self) -> bool:
        return self.codes.dtype.kind == "i"

    @property
    def _gone(self) -> int | bytes:
        return _GONE_INT if self.is_int else b""

    # lookups --------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Live entities (emptied rows apart)."""
        return self.n_live

    @property
    def n_rows(self) -> int:
        return len(self.codes)

    def __getitem__(self, row: int) -> str:
        c = self.codes[int(row)]
        if c == self._gone:
            raise KeyError(row)
        return f"Q{int(c)}" if self.is_int else bytes(c).decode()

    def __iter__(self) -> Iterator[str]:
        """Live ids in row order."""
        gone = self._gone
        if self.is_int:
            return (f"Q{c}" for c in self.codes.tolist() if c != gone)
        return (c.decode() for c in self.codes.tolist() if c != gone)

    def tolist(self) -> list[str]:
        return list(self)

    def slice_ids(self, start: int, stop: int) -> list[str]:
        """The live ids of rows ``start:stop`` as strings (one batch's worth at a time)."""
        return self.slice_ids_at(np.arange(start, stop))

    def slice_ids_at(self, rows: np.ndarray) -> list[str]:
        """The live ids at ``rows`` as strings, in that order."""
        codes = self.codes[np.asarray(rows, dtype=np.int64)]
        gone = self._gone
        if self.is_int:
            return [f"Q{c}" for c in codes.tolist() if c != gone]
        return [c.decode() for c in codes.tolist() if c != gone]

    def encode(self, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(codes, valid): ids that cannot be in this table (another kind) are not valid."""
        if self.is_int:
            match = _QNUM.fullmatch
            ok = np.fromiter((match(q) is not None for q in ids), dtype=bool, count=len(ids))
            codes = np.fromiter((int(q[1:]) if v else 0 for q, v in zip(ids, ok, strict=True)),
                                dtype=np.int64, count=len(ids))
            return codes, ok
        raw = [q.encode() for q in ids]
        width = self.codes.dtype.itemsize
        ok = np.fromiter((0 < len(b) <= width for b in raw), dtype=bool, count=len(raw))
        codes = np.asarray([b if v else b"" for b, v in zip(raw, ok, strict=True)], dtype=self.codes.dtype) \
            if raw else np.zeros(0, self.codes.dtype)
        return codes, ok

    def rows_of_codes(self, codes: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Row of each code, -1 where absent (vectorized binary search)."""
        if len(self._sorted) == 0 or len(codes) == 0:
            return np.full(len(codes), -1, dtype=np.int64)
        pos = np.searchsorted(self._sorted, codes)
        pos_c = np.minimum(pos, len(self._sorted) - 1)
        hit = self._sorted[pos_c] == codes
        if valid is not None:
            hit &= valid
        rows = pos_c.astype(np.int64) if self.order is None else self.order[pos_c].astype(np.int64)
        return np.where(hit, rows, -1)

    def rows_of(self, ids: Sequence[str]) -> np.ndarray:
        codes, ok = self.encode(ids)
        return self.rows_of_codes(codes, ok)

    def row(self, qid: str) -> int:
        """The row of ``qid``, -1 when it is not in the table (one id: a scalar binary search,
        about 2 µs, where the array path costs 15 µs of set-up)."""
        if not self.is_int:
            return int(self.rows_of([qid])[0])
        if _QNUM.fullmatch(qid) is None or len(self._sorted) == 0:
            return -1
        c = int(qid[1:])
        pos = int(np.searchsorted(self._sorted, c))
        if pos >= len(self._sorted) or int(self._sorted[pos]) != c:
            return -1
        return pos if self.order is None else int(self.order[pos])

    def __contains__(self, qid: object) -> bool:
        return isinstance(qid, str) and self.row(qid) >= 0

    def live_mask(self) -> np.ndarray:
        """True at every row that holds an entity (False where an update emptied it)."""
        return self._live

    def live_rows(self) -> np.ndarray:
        return np.flatnonzero(self.live_mask())

    # changes ----------------------------------------------------------------------------------

    def with_changes(self, drop_rows: np.ndarray, add_ids: Sequence[str]) -> QidTable:
        """A new table: ``drop_rows`` emptied, ``add_ids`` appended as new rows."""
        codes = self.codes.copy()
        codes[np.asarray(drop_rows, dtype=np.int64)] = self._gone
        if len(add_ids):
            new, ok = self.encode(add_ids)
            if not bool(ok.all()):  # an id of another kind (or wider): re-encode as bytes
                return self._as_bytes(codes, add_ids)
            codes = np.concatenate([codes, new])
        return QidTable(codes)

    def _as_bytes(self, codes: np.ndarray, add_ids: Sequence[str]) -> QidTable:
        gone = self._gone
        old = [b"" if c == gone else (f"Q{int(c)}".encode() if self.is_int else bytes(c))
               for c in codes.tolist()]
        return QidTable(np.asarray(old + [q.encode() for q in add_ids], dtype=np.bytes_))

    # persistence --------------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        with open(path, "wb") as fh:
            np.save(fh, self.codes, allow_pickle=False)

    @classmethod
    def load(cls, path: Path) -> QidTable:
        return cls(np.load(path, allow_pickle=False))

    def canonical(self) -> tuple[np.ndarray, np.ndarray]:
        """(live codes in sorted order, their rows): an order-independent view for hashing."""
        if self.order is None:
            return self.codes, np.arange(len(self.codes))
        return self._sorted, self.order
