"""Packing plans: many (context + continuation trie) segments per forward row (DESIGN §3).

Every causal request reduces to an *item* ``(context ids, continuation ids)``: a continuation
log-prob, a whole sentence (context = its prefix token), a next-token distribution (empty
continuation). Items with the same context share one segment: the context once, then a trie of
the continuations' prefixes (a continuation's last token is never fed: nothing reads its
output). Segments are packed into rows of at most ``budget`` tokens.

The trie is laid out in depth-first pre-order, so "ancestor or self" is an interval test:
node ``j`` is an ancestor of node ``i`` iff ``j <= i < end[j]``, where ``end[j]`` is one past
the last node of ``j``'s subtree. A context token is an ancestor of everything after it in its
segment (``end`` = the segment's end), so one rule gives the whole mask::

    allowed[q, kv] = kv <= q < end[kv]

contexts causal inside their segment, a node sees its context, its ancestors and itself, and
segments never see each other. Everything here is numpy over whole arrays: no Python loop per
token or per trie node (the loops are per trie depth, per oversized context and per segment).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class PackedRow:
    """One forward: token ids, position ids and the mask's ``end`` per position (length L)."""

    ids: np.ndarray
    positions: np.ndarray
    end: np.ndarray


@dataclass
class PackPlan:
    """Rows to feed and, per item, which row positions to read for which target token.

    Reads are flat, grouped by item in input order: item ``i`` owns
    ``read_start[i] : read_start[i + 1]``; an item with an empty continuation has one read
    (its context's last position, target -1: the caller wants the whole distribution)."""

    rows: list[PackedRow]
    read_row: np.ndarray
    read_pos: np.ndarray
    read_target: np.ndarray
    read_start: np.ndarray

    @property
    def tokens(self) -> int:
        return int(sum(len(r.ids) for r in self.rows))


def _padded(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(n, width) int64 matrix of the sequences padded with -1, and their lengths."""
    lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = max(1, int(lens.max()) if len(seqs) else 1)
    flat = np.fromiter((t for s in seqs for t in s), dtype=np.int64, count=int(lens.sum()))
    out = np.full((len(seqs), width), -1, dtype=np.int64)
    rows = np.repeat(np.arange(len(seqs)), lens)
    cols = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
    out[rows, cols] = flat
    return out, lens


#: segment cap of ``plan``: attention inside a segment is computed densely (a trie's tree
#: mask is sparse, but neither SDPA nor FlexAttention's blocks can skip much of it), so one
#: 6,700-token trie (BEAR's sentences all share the conditioning token) cost its square
SEGMENT_TOKENS = 512


def plan(
    contexts: Sequence[tuple[int, ...]],
    continuations: Sequence[Sequence[int]],
    budget: int,
    segment: int | None = SEGMENT_TOKENS,
) -> PackPlan:
    """Pack items ``(contexts[i], continuations[i])`` into rows of about ``budget`` tokens.

    A context's trie is split into segments of at most ``segment`` tokens (at least twice
    the context, so a long context is not re-fed for every continuation; never more than
    the budget), each re-feeding the context; a segment never exceeds that unless its
    context alone (plus one continuation's nodes) does, and then gets a row of its own."""
    n = len(contexts)
    group_of: dict[tuple[int, ...], int] = {}
    gid = np.fromiter((group_of.setdefault(c, len(group_of)) for c in contexts),
                      dtype=np.int64, count=n)
    ctx_list = list(group_of)
    ctx_len = np.fromiter((len(c) for c in ctx_list), dtype=np.int64, count=len(ctx_list))
    cont, lens = _padded(continuations)
    width = cont.shape[1]

    # sort by (group, continuation): a trie's prefixes become contiguous, shorter first
    keys = [cont[:, j] for j in range(width - 1, -1, -1)] + [gid]
    order = np.lexsort(keys)
    c = cont[order]
    g = gid[order]
    ln = lens[order]
    n_nodes = np.maximum(ln - 1, 0)  # the last token is read, never fed

    # nodes shared with the previous item: common prefix, capped by its own node count
    share = np.zeros(n, dtype=np.int64)
    if n > 1:
        eq = (c[1:] == c[:-1]) & (c[1:] >= 0)
        lcp = np.cumprod(eq, axis=1).sum(axis=1)
        share[1:] = np.where(g[1:] == g[:-1], np.minimum(lcp, n_nodes[:-1]), 0)
    share = np.minimum(share, n_nodes)
    starts = np.ones(n, dtype=bool)
    if n > 1:
        starts[1:] = g[1:] != g[:-1]

    # split contexts whose trie does not fit the cap (rare: a loop per oversized group)
    new_count = n_nodes - share
    group_total = np.bincount(g, weights=new_count, minlength=len(ctx_list)) + ctx_len
    cap = np.minimum(budget, np.maximum(segment or budget, 2 * ctx_len))
    for grp in np.nonzero(group_total > cap)[0]:
        members = np.nonzero(g == grp)[0]
        room = int(cap[grp] - ctx_len[grp])
        fed = 0
        for i in members:
            add = int(n_nodes[i] - share[i])
            if fed > 0 and fed + add > room:
                starts[i] = True
                share[i] = 0
                add = int(n_nodes[i])
                fed = 0
            fed += add
    seg = np.cumsum(starts) - 1
    n_seg = int(seg[-1]) + 1 if n else 0
    seg_group = g[starts]

    # node ids in pre-order: row-major over (item, depth); shared nodes inherit the id of
    # the item above (a running maximum down each depth column)
    cols = np.arange(width)[None, :]
    exists = cols < n_nodes[:, None]
    is_new = exists & (cols >= share[:, None])
    flat_new = is_new.ravel()
    ids_new = np.where(flat_new, np.cumsum(flat_new) - 1, -1).reshape(is_new.shape)
    node_id = np.maximum.accumulate(ids_new, axis=0)
    node_id = np.where(exists, node_id, -1)
    total_nodes = int(flat_new.sum())

    # subtree ends: the last item below that still shares the node; its largest node id + 1
    row_max = np.maximum.accumulate(node_id.max(axis=1, initial=-1))
    node_end = np.zeros(total_nodes, dtype=np.int64)
    idx = np.arange(n)
    for j in range(width):
        col_new = is_new[:, j]
        if not col_new.any():
            continue
        brk = np.ones(n + 1, dtype=bool)
        brk[1:n] = starts[1:] | (share[1:] < j + 1)
        nxt = np.where(brk, np.arange(n + 1), n)
        nxt = np.minimum.accumulate(nxt[::-1])[::-1]  # first break at or after each index
        last = nxt[np.minimum(idx + 1, n)] - 1
        rows_new = idx[col_new]
        node_end[ids_new[rows_new, j]] = row_max[last[rows_new]] + 1

    node_item = np.nonzero(is_new)[0]  # item that created each node (pre-order)
    node_depth = np.nonzero(is_new)[1]
    node_token = c[node_item, node_depth]
    node_seg = seg[node_item]
    seg_first = np.full(n_seg, total_nodes, dtype=np.int64)
    np.minimum.at(seg_first, node_seg, np.arange(total_nodes))
    seg_nodes = np.bincount(node_seg, minlength=n_seg).astype(np.int64)
    seg_first = np.where(seg_nodes > 0, seg_first, 0)
    seg_ctx = ctx_len[seg_group]
    seg_size = seg_ctx + seg_nodes

    # first-fit decreasing of segments into rows (a loop per segment)
    seg_row = np.zeros(n_seg, dtype=np.int64)
    seg_off = np.zeros(n_seg, dtype=np.int64)
    fill: list[int] = []
    for s in np.argsort(-seg_size, kind="stable"):
        size = int(seg_size[s])
        r = next((k for k, f in enumerate(fill) if f + size <= budget), len(fill))
        if r == len(fill):
            fill.append(0)
        seg_row[s], seg_off[s] = r, fill[r]
        fill[r] += size

    # flat token table: contexts of every segment, then the nodes
    ctx_tok = np.fromiter((t for s in seg_group for t in ctx_list[s]), dtype=np.int64,
                          count=int(seg_ctx.sum()))
    ctx_seg = np.repeat(np.arange(n_seg), seg_ctx)
    ctx_k = np.arange(len(ctx_tok)) - np.repeat(np.cumsum(seg_ctx) - seg_ctx, seg_ctx)
    node_k = np.arange(total_nodes) - seg_first[node_seg]
    tok = np.concatenate([ctx_tok, node_token])
    t_seg = np.concatenate([ctx_seg, node_seg])
    t_at = np.concatenate([seg_off[ctx_seg] + ctx_k, seg_off[node_seg] + seg_ctx[node_seg] + node_k])
    t_pos = np.concatenate([ctx_k, seg_ctx[node_seg] + node_depth])
    t_end = np.concatenate([
        seg_off[ctx_seg] + seg_size[ctx_seg],
        seg_off[node_seg] + seg_ctx[node_seg] + node_end - seg_first[node_seg],
    ])
    t_row = seg_row[t_seg]
    rows: list[PackedRow] = []
    for r, length in enumerate(fill):
        m = t_row == r
        ids = np.zeros(length, dtype=np.int64)
        pos = np.zeros(length, dtype=np.int64)
        end = np.zeros(length, dtype=np.int64)
        ids[t_at[m]] = tok[m]
        pos[t_at[m]] = t_pos[m]
        end[t_at[m]] = t_end[m]
        rows.append(PackedRow(ids, pos, end))

    # reads, in sorted item order: token 0 after the context, token t after node t-1
    n_reads = np.maximum(ln, 1)
    r_item = np.repeat(np.arange(n), n_reads)
    r_t = np.arange(int(n_reads.sum())) - np.repeat(np.cumsum(n_reads) - n_reads, n_reads)
    s_of = seg[r_item]
    ctx_last = seg_off[s_of] + seg_ctx[s_of] - 1
    prev_node = node_id[r_item, np.maximum(r_t - 1, 0)]
    at_node = seg_off[s_of] + seg_ctx[s_of] + prev_node - seg_first[s_of]
    r_pos = np.where(r_t == 0, ctx_last, at_node)
    r_target = np.where(ln[r_item] > 0, c[r_item, np.minimum(r_t, width - 1)], -1)
    r_row = seg_row[s_of]

    # back to input order
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    sorted_start = np.cumsum(n_reads) - n_reads
    in_reads = n_reads[inv]
    read_start = np.concatenate([[0], np.cumsum(in_reads)])
    take = np.repeat(sorted_start[inv], in_reads) + (
        np.arange(int(in_reads.sum())) - np.repeat(read_start[:-1], in_reads))
    return PackPlan(rows, r_row[take], r_pos[take], r_target[take], read_start)
