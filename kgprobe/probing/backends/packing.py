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
segments never see each other.

Distinct contexts that share a long prefix (few-shot demonstrations before each prompt) share
it as a *trunk*: one copy per row, followed by the segments of those contexts, each holding
only its own context suffix and trie. Trunk tokens are ancestors of every segment after them
in the unit, so the same interval rule covers them. Each row also lists its attention
*blocks* — a segment's queries with the keys of its trunk and of itself — so a block-wise
attention (``causal._segment_attention``) costs |segment| × (|trunk| + |segment|), never the
square of the row. Everything here is numpy over whole arrays: no Python loop per token or per
trie node (the loops are per trie depth, per distinct context, per oversized context and per
segment).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class PackedRow:
    """One forward: token ids, position ids and the mask's ``end`` per position (length L),
    and the attention blocks ``(q_start, q_end, trunk_start, trunk_end)`` that tile the row:
    a query in ``[q_start, q_end)`` sees keys only there and in its trunk (empty trunk:
    ``trunk_start == trunk_end``)."""

    ids: np.ndarray
    positions: np.ndarray
    end: np.ndarray
    blocks: np.ndarray


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

#: shortest shared context prefix worth a trunk: below it a segment just re-feeds its context
MIN_TRUNK = 8


def _trunks(ctx_list: Sequence[tuple[int, ...]], budget: int,
            min_len: int = MIN_TRUNK) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct context: its trunk's id (-1: none) and the trunk's length.

    Sorted contexts with a common prefix of at least ``min_len`` tokens form a run; the run's
    trunk is the prefix all of them share, kept short enough that every context keeps at
    least one token of its own and a unit still fits the budget. A run splits where that pays:
    where sub-runs share longer trunks that save more re-fed tokens than the whole run's."""
    m = len(ctx_list)
    tid = np.full(m, -1, dtype=np.int64)
    tlen = np.zeros(m, dtype=np.int64)
    if m < 2:
        return tid, tlen
    mat, lens = _padded(ctx_list)
    order = np.lexsort([mat[:, j] for j in range(mat.shape[1] - 1, -1, -1)])
    srt, sl = mat[order], lens[order]
    eq = (srt[1:] == srt[:-1]) & (srt[1:] >= 0)
    lcp = np.cumprod(eq, axis=1).sum(axis=1)
    lcp = np.minimum(lcp, np.minimum(sl[1:], sl[:-1]) - 1)  # each context keeps a token
    lcp = np.minimum(lcp, budget // 2)  # a trunk leaves room in a row for its segments
    runs: list[tuple[int, int, int]] = []  # (first, last, trunk length), sorted indices
    stack: list[tuple[int, int]] = []
    ok = lcp >= min_len
    i = 0
    while i < m - 1:  # maximal runs of neighbours sharing >= min_len tokens
        if not ok[i]:
            i += 1
            continue
        j = i
        while j < m - 1 and ok[j]:
            j += 1
        stack.append((i, j))
        i = j
    while stack:  # keep a run whole or split it at its weakest links, whichever saves more
        lo, hi = stack.pop()
        part = lcp[lo:hi]
        t = int(part.min())
        cuts = np.flatnonzero(part == t) + lo
        subs = [(a, b) for a, b in zip(np.r_[lo, cuts + 1], np.r_[cuts, hi], strict=True)
                if b > a]
        gain = sum((b - a) * int(lcp[a:b].min()) for a, b in subs)
        if gain > (hi - lo) * t:
            stack.extend((int(a), int(b)) for a, b in subs)
        else:
            runs.append((lo, hi, t))
    for k, (lo, hi, t) in enumerate(runs):
        tid[order[lo : hi + 1]] = k
        tlen[order[lo : hi + 1]] = t
    return tid, tlen


def plan(
    contexts: Sequence[tuple[int, ...]],
    continuations: Sequence[Sequence[int]],
    budget: int,
    segment: int | None = SEGMENT_TOKENS,
) -> PackPlan:
    """Pack items ``(contexts[i], continuations[i])`` into rows of about ``budget`` tokens.

    Contexts sharing a long prefix share it as a trunk (``_trunks``). A context's trie is
    split into segments of at most ``segment`` tokens besides the trunk (at least twice the
    context's own tokens, so a long context is not re-fed for every continuation; never more
    than the budget), each re-feeding the context's own tokens; a segment never exceeds that
    unless its context alone (plus one continuation's nodes) does, and then gets a row of its
    own."""
    n = len(contexts)
    group_of: dict[tuple[int, ...], int] = {}
    gid = np.fromiter((group_of.setdefault(c, len(group_of)) for c in contexts),
                      dtype=np.int64, count=n)
    ctx_list = list(group_of)
    ctx_len = np.fromiter((len(c) for c in ctx_list), dtype=np.int64, count=len(ctx_list))
    g_trunk, g_tl = _trunks(ctx_list, budget)
    own_len = ctx_len - g_tl  # context tokens each segment feeds itself
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
    group_total = np.bincount(g, weights=new_count, minlength=len(ctx_list)) + own_len
    cap = np.minimum(budget - g_tl, np.maximum(segment or budget, 2 * own_len))
    for grp in np.nonzero(group_total > cap)[0]:
        members = np.nonzero(g == grp)[0]
        room = int(cap[grp] - own_len[grp])
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
    seg_ctx = own_len[seg_group]
    seg_tl = g_tl[seg_group]
    seg_size = seg_ctx + seg_nodes

    # units: a trunk and as many of its segments as fit the budget, or a lone segment
    # (a loop per segment)
    seg_unit = np.zeros(n_seg, dtype=np.int64)
    seg_in = np.zeros(n_seg, dtype=np.int64)  # offset inside the unit
    unit_size: list[int] = []
    unit_tl: list[int] = []
    unit_ctx: list[int] = []  # a context of the unit's trunk (the trunk is its prefix)
    open_unit: dict[int, int] = {}
    for s in range(n_seg):
        gr, t, size = int(seg_group[s]), int(g_trunk[seg_group[s]]), int(seg_size[s])
        u = open_unit.get(t, -1) if t >= 0 else -1
        if u < 0 or unit_size[u] + size > budget:
            u = len(unit_size)
            tl = int(g_tl[gr]) if t >= 0 else 0
            unit_size.append(tl)
            unit_tl.append(tl)
            unit_ctx.append(gr)
            if t >= 0:
                open_unit[t] = u
        seg_unit[s], seg_in[s] = u, unit_size[u]
        unit_size[u] += size

    # first-fit decreasing of units into rows (a loop per unit)
    n_unit = len(unit_size)
    u_size = np.asarray(unit_size, dtype=np.int64)
    u_tl = np.asarray(unit_tl, dtype=np.int64)
    u_row = np.zeros(n_unit, dtype=np.int64)
    u_off = np.zeros(n_unit, dtype=np.int64)
    fill: list[int] = []
    for w in np.argsort(-u_size, kind="stable"):
        size = int(u_size[w])
        r = next((k for k, f in enumerate(fill) if f + size <= budget), len(fill))
        if r == len(fill):
            fill.append(0)
        u_row[w], u_off[w] = r, fill[r]
        fill[r] += size
    seg_row = u_row[seg_unit]
    seg_off = u_off[seg_unit] + seg_in

    # flat token table: trunks of every unit, contexts' own tokens of every segment, nodes
    tr_tok = np.fromiter((t for w in range(n_unit) for t in ctx_list[unit_ctx[w]][: unit_tl[w]]),
                         dtype=np.int64, count=int(u_tl.sum()))
    tr_unit = np.repeat(np.arange(n_unit), u_tl)
    tr_k = np.arange(len(tr_tok)) - np.repeat(np.cumsum(u_tl) - u_tl, u_tl)
    ctx_tok = np.fromiter((t for s in range(n_seg) for t in ctx_list[seg_group[s]][seg_tl[s]:]),
                          dtype=np.int64, count=int(seg_ctx.sum()))
    ctx_seg = np.repeat(np.arange(n_seg), seg_ctx)
    ctx_k = np.arange(len(ctx_tok)) - np.repeat(np.cumsum(seg_ctx) - seg_ctx, seg_ctx)
    node_k = np.arange(total_nodes) - seg_first[node_seg]
    tok = np.concatenate([tr_tok, ctx_tok, node_token])
    t_row = np.concatenate([u_row[tr_unit], seg_row[ctx_seg], seg_row[node_seg]])
    t_at = np.concatenate([u_off[tr_unit] + tr_k, seg_off[ctx_seg] + ctx_k,
                           seg_off[node_seg] + seg_ctx[node_seg] + node_k])
    t_pos = np.concatenate([tr_k, seg_tl[ctx_seg] + ctx_k,
                            seg_tl[node_seg] + seg_ctx[node_seg] + node_depth])
    t_end = np.concatenate([
        u_off[tr_unit] + u_size[tr_unit],
        seg_off[ctx_seg] + seg_size[ctx_seg],
        seg_off[node_seg] + seg_ctx[node_seg] + node_end - seg_first[node_seg],
    ])
    # attention blocks: each trunk alone, each segment with its unit's trunk
    has_tr = u_tl > 0
    b_row = np.concatenate([u_row[has_tr], seg_row])
    tr_a = u_off[seg_unit]
    blocks = np.concatenate([
        np.stack([u_off, u_off + u_tl, u_off, u_off], axis=1)[has_tr],
        np.stack([seg_off, seg_off + seg_size, tr_a, tr_a + u_tl[seg_unit]], axis=1),
    ]).reshape(-1, 4)
    rows: list[PackedRow] = []
    for r, length in enumerate(fill):
        m = t_row == r
        ids = np.zeros(length, dtype=np.int64)
        pos = np.zeros(length, dtype=np.int64)
        end = np.zeros(length, dtype=np.int64)
        ids[t_at[m]] = tok[m]
        pos[t_at[m]] = t_pos[m]
        end[t_at[m]] = t_end[m]
        rb = blocks[(b_row == r) & (blocks[:, 1] > blocks[:, 0])]
        rows.append(PackedRow(ids, pos, end, rb[np.argsort(rb[:, 0], kind="stable")]))

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
