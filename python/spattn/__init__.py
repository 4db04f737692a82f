"""spattn: exact block-sparse softmax attention for PyTorch.

    import spattn
    mask = spattn.patterns.sliding_window(4096, window=512, device="cuda")
    out = spattn.attention(q, k, v, mask)          # q, k, v as for SDPA

``spattn.attention`` is a ``torch.library`` operator (CPU and, when built with
CUDA, CUDA kernels, plus a fake kernel), so ``torch.compile(fullgraph=True)``
traces it without graph breaks; ``spattn.attention_varlen`` takes packed
batches of variable-length sequences (FlashAttention's ``cu_seqlens``);
``spattn.attention_with_kvcache`` attends over a paged or contiguous KV cache
(CPU tensors for now). Masks
come from ``spattn.patterns``, ``spattn.BlockMask.from_dense`` or
``spattn.BlockMask.from_flex``; the Hugging Face integration is
``spattn.integrations.hf``. ``spattn.select_blocks`` and
``spattn.dynamic_attention`` choose the blocks from q and k at run time. See
docs/python.md.
"""
from spattn import _autograd, patterns  # noqa: F401 (_autograd registers the gradients)
from spattn._ops import built_with_cuda
from spattn.attention import attention, attention_varlen
from spattn.block_mask import BlockMask
from spattn.dynamic import dynamic_attention, select_blocks, select_blocks_batched
from spattn.kvcache import attention_with_kvcache, page_summaries, select_pages

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "page_summaries", "select_pages", "BlockMask", "patterns", "built_with_cuda", "select_blocks", "select_blocks_batched",
           "dynamic_attention"]
__version__ = "0.1.0"
