"""Patterns on the Python side: the library's encoding held as host data.

A ``Pattern`` is the encoding of a C++ ``spattn::Pattern``
(include/spattn/pattern_codec.hpp): an int code (a tuple, so it can be passed
to the attention operator as a graph constant) and two CPU tables. Every
operation (building, union, intersection, per-head mixes, description) runs in
the C++ library through the ``torch.ops.spattn.pattern_*`` operators, so the
meaning and the validation of a pattern live in one place.
"""
from __future__ import annotations

from functools import cached_property
from typing import Sequence

import torch

from spattn._ops import ops


class Pattern:
    """An immutable, encoded sparse-attention pattern (host side)."""

    def __init__(self, code: Sequence[int], table_i32: torch.Tensor, table_i64: torch.Tensor):
        self.code = tuple(int(word) for word in code)
        self.table_i32 = table_i32
        self.table_i64 = table_i64

    @classmethod
    def from_op(cls, encoded) -> "Pattern":
        """From the (code, table_i32, table_i64) tensors an operator returned."""
        code, table_i32, table_i64 = encoded
        return cls(code.tolist(), table_i32, table_i64)

    def tensors(self):
        """(code, table_i32, table_i64) as CPU tensors, the operators' input form."""
        return torch.tensor(self.code, dtype=torch.int64), self.table_i32, self.table_i64

    @cached_property
    def head_dependent(self) -> bool:
        """True when some term reads the head index (dilated rates, per-head mixes)."""
        return bool(ops.pattern_head_dependent(*self.tensors()))

    def describe(self) -> str:
        return bytes(ops.pattern_describe(*self.tensors()).tolist()).decode()

    def unite(self, other: "Pattern") -> "Pattern":
        return Pattern.from_op(ops.pattern_combine(*self.tensors(), *other.tensors(), False))

    def intersect(self, other: "Pattern") -> "Pattern":
        return Pattern.from_op(ops.pattern_combine(*self.tensors(), *other.tensors(), True))

    def with_causal(self) -> "Pattern":
        return Pattern.from_op(ops.pattern_with_causal(*self.tensors()))

    def framed(self, first_row: int, first_key: int, q_len: int, k_len: int) -> "Pattern":
        """The pattern as seen by a call whose query rows are rows [first_row, first_row + Lq) and
        whose keys are keys [first_key, first_key + Lk) of a q_len x k_len problem (bottom-right
        aligned there): one rank's queries against one peer's keys in context parallelism."""
        return Pattern.from_op(ops.pattern_framed(*self.tensors(), int(first_row), int(first_key),
                                                  int(q_len), int(k_len)))

    @staticmethod
    def per_head(heads: Sequence["Pattern"]) -> "Pattern":
        encoded = [p.tensors() for p in heads]
        return Pattern.from_op(
            ops.pattern_per_head([e[0] for e in encoded], [e[1] for e in encoded],
                                 [e[2] for e in encoded]))

    def __eq__(self, other) -> bool:
        return (isinstance(other, Pattern) and self.code == other.code
                and torch.equal(self.table_i32, other.table_i32)
                and torch.equal(self.table_i64, other.table_i64))

    __hash__ = None

    def __repr__(self) -> str:
        return f"Pattern({self.describe()})"
