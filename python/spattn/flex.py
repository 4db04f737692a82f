"""Conversion between spattn.BlockMask and FlexAttention's BlockMask.

FlexAttention (torch.nn.attention.flex_attention) keeps, per (batch, head,
query block), the partial key blocks (``kv_num_blocks``/``kv_indices``) and the
full ones (``full_kv_num_blocks``/``full_kv_indices``), and decides pairs
inside partial blocks by calling ``mask_mod(b, h, q_idx, kv_idx)``. spattn keeps
the same two kinds of blocks in one sorted list per row.

``from_flex`` takes the block lists and, for the pairs inside partial blocks,
either the pattern of a spattn mask given as ``pattern`` (blocks kept as flex
classified them) or the flex mask's own ``mask_mod``, evaluated once on the
partial blocks only (broadcast over index tensors, as vmap would): blocks it
allows whole become full, the rest a token-level custom pattern. Flex masks are shared across a batch in spattn, so every batch
entry must hold the same blocks. ``to_flex`` writes the block lists back and,
unless a ``mask_mod`` is given, looks pairs up in ``to_dense()`` (small shapes).
"""
from __future__ import annotations

import torch

from spattn._ops import ops
from spattn._pattern import Pattern
from spattn.block_mask import BlockMask

_NONE, _PARTIAL, _FULL = 0, 1, 2


def _block_state(num_blocks, indices, state_value, state):
    """Marks the first num_blocks[h, r] entries of indices[h, r] in state (H, R, C + 1)."""
    if num_blocks is None:
        return
    columns = state.shape[-1] - 1
    width = indices.shape[-1]
    valid = torch.arange(width, device=indices.device) < num_blocks.unsqueeze(-1)
    target = torch.where(valid, indices.long(), torch.full_like(indices, columns, dtype=torch.long))
    state.scatter_(-1, target, state_value)
    state[..., columns] = _NONE


def _single_batch(t, name):
    if t is None:
        return None
    if t.shape[0] > 1 and not bool((t == t[:1]).all()):
        raise ValueError(f"flex_block_mask.{name} differs between batch entries; spattn masks are "
                         "shared by the whole batch")
    return t[0]


def _resolve_partial_blocks(flex, state, q_len, k_len, block_q, block_k) -> Pattern:
    """Evaluates mask_mod on the partial blocks of `state` (H, R, C).

    Blocks whose pairs (inside the sequence) are all allowed become full, those
    with none are dropped (flex classifies the short last blocks with their
    padding); the pairs of the remaining partial blocks become a custom
    pattern with 1 x 1 blocks.
    """
    heads = state.shape[0]
    h, r, c = (state == _PARTIAL).nonzero(as_tuple=True)
    device = state.device
    q_idx = r.view(-1, 1, 1) * block_q + torch.arange(block_q, device=device).view(1, -1, 1)
    kv_idx = c.view(-1, 1, 1) * block_k + torch.arange(block_k, device=device).view(1, 1, -1)
    inside = (q_idx < q_len) & (kv_idx < k_len)
    allowed = flex.mask_mod(torch.zeros_like(h).view(-1, 1, 1), h.view(-1, 1, 1),
                            q_idx.clamp(max=q_len - 1), kv_idx.clamp(max=k_len - 1))
    allowed = torch.broadcast_to(torch.as_tensor(allowed, device=device), inside.shape) & inside
    kept = allowed.sum((1, 2))
    full = kept == inside.sum((1, 2))
    state[h[full], r[full], c[full]] = _FULL
    state[h[kept == 0], r[kept == 0], c[kept == 0]] = _NONE
    allowed[full] = False
    n, di, dj = allowed.nonzero(as_tuple=True)
    rows = h[n] * q_len + q_idx[n, di, 0]
    cols = kv_idx[n, 0, dj]
    order = torch.argsort(rows * k_len + cols)
    rows, cols = rows[order], cols[order]
    offsets = torch.zeros(heads * q_len + 1, dtype=torch.int64, device=device)
    offsets[1:] = torch.bincount(rows, minlength=heads * q_len).cumsum(0)
    return Pattern.from_op(ops.pattern_custom_bsr(offsets.cpu(), cols.to(torch.int32).cpu(), heads,
                                                  q_len, k_len, 1, 1, False))


def from_flex(flex_block_mask, pattern: BlockMask | None = None) -> BlockMask:
    """A spattn.BlockMask holding the same blocks and pairs as a FlexAttention BlockMask."""
    flex = flex_block_mask
    for attribute in ("kv_num_blocks", "kv_indices", "BLOCK_SIZE", "seq_lengths", "mask_mod"):
        if not hasattr(flex, attribute):
            raise TypeError("flex_block_mask must be a torch.nn.attention.flex_attention.BlockMask, "
                            f"got {type(flex).__name__}")
    q_len, k_len = (int(n) for n in flex.seq_lengths)
    block_q, block_k = (int(n) for n in flex.BLOCK_SIZE)
    rows, columns = -(-q_len // block_q), -(-k_len // block_k)
    partial_n = _single_batch(flex.kv_num_blocks, "kv_num_blocks")
    heads = partial_n.shape[0]
    if partial_n.shape[1] < rows:
        raise ValueError(f"flex_block_mask has {partial_n.shape[1]} query blocks but Lq={q_len} with "
                         f"block {block_q} needs {rows}")
    state = torch.zeros(heads, rows, columns + 1, dtype=torch.int8, device=partial_n.device)
    _block_state(partial_n[:, :rows], _single_batch(flex.kv_indices, "kv_indices")[:, :rows],
                 _PARTIAL, state)
    full_n = _single_batch(flex.full_kv_num_blocks, "full_kv_num_blocks")
    if full_n is not None:
        _block_state(full_n[:, :rows], _single_batch(flex.full_kv_indices, "full_kv_indices")[:, :rows],
                     _FULL, state)
    state = state[..., :columns].contiguous()

    if pattern is not None:
        if not isinstance(pattern, BlockMask):
            raise TypeError(f"pattern must be a spattn.BlockMask or None, got {type(pattern).__name__}")
        if (pattern.q_len, pattern.k_len) != (q_len, k_len):
            raise ValueError(f"pattern was built for Lq={pattern.q_len}, Lk={pattern.k_len} but the flex "
                             f"mask is for Lq={q_len}, Lk={k_len}")
        mask_pattern = pattern.pattern
    else:
        mask_pattern = _resolve_partial_blocks(flex, state, q_len, k_len, block_q, block_k)

    kept = state != _NONE
    row_offsets = torch.zeros(heads * rows + 1, dtype=torch.int64, device=state.device)
    row_offsets[1:] = kept.view(heads * rows, columns).sum(-1).cumsum(0)
    kv_indices = kept.nonzero(as_tuple=True)[2].to(torch.int32)
    kv_full = (state[kept] == _FULL).to(torch.uint8)
    mask = BlockMask(q_len, k_len, (block_q, block_k), row_offsets, kv_indices, kv_full, mask_pattern,
                     mask_pattern.head_dependent, heads)
    # Validates the arrays against the pattern.
    ops.block_mask_kept_pairs(mask._on(torch.device("cpu")).packed, heads)
    return mask


def to_flex(mask: BlockMask, mask_mod=None):
    """A FlexAttention BlockMask holding the same blocks as `mask`.

    Without `mask_mod`, pairs in partial blocks are looked up in ``mask.to_dense()``
    (an (H, Lq, Lk) tensor: for small shapes).
    """
    from torch.nn.attention.flex_attention import BlockMask as FlexBlockMask

    heads, rows = mask.num_heads, -(-mask.q_len // mask.block_size[0])
    columns = -(-mask.k_len // mask.block_size[1])
    counts = mask.row_offsets.diff()
    row_of_entry = torch.repeat_interleave(torch.arange(heads * rows, device=mask.device), counts)
    state = torch.zeros(heads * rows, columns, dtype=torch.int8, device=mask.device)
    state[row_of_entry, mask.kv_indices.long()] = torch.where(mask.kv_full.bool(), _FULL, _PARTIAL).to(torch.int8)
    state = state.view(1, heads, rows, columns)

    def lists(kind):
        selected = (state == kind).to(torch.int8)
        order = torch.sort(selected, dim=-1, descending=True, stable=True).indices
        return selected.sum(-1).to(torch.int32), order.to(torch.int32)

    if mask_mod is None:
        dense = mask.to_dense()

        def mask_mod(b, h, q_idx, kv_idx):
            return dense[h, q_idx, kv_idx]

    kv_num_blocks, kv_indices = lists(_PARTIAL)
    full_kv_num_blocks, full_kv_indices = lists(_FULL)
    return FlexBlockMask.from_kv_blocks(kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
                                        BLOCK_SIZE=mask.block_size, mask_mod=mask_mod,
                                        seq_lengths=(mask.q_len, mask.k_len))
