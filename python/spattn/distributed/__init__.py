"""spattn.distributed: context parallelism, one sequence over the ranks of a group.

``attention(q, k, v, mask, group=None, layout="zigzag")`` takes this rank's
shard of the inputs and the global mask, moves only the key and value rows
each rank's queries need (``ContextParallelPlan``), and returns this rank's
shard of the exact result; differentiable. ``shard``/``unshard`` move
tensors between the global order and the shards; ``ShardLayout`` says which
chunks each rank holds. Transports: a torch.distributed process group (gloo,
NCCL) or an ``InProcessGroup`` of threads for tests on one machine.
"""
from spattn.distributed.attention import attention, plan_for
from spattn.distributed.layout import ShardLayout, shard, unshard
from spattn.distributed.plan import ContextParallelPlan, SequenceMask
from spattn.distributed.transport import InProcessGroup, TorchTransport, Transport

__all__ = ["attention", "plan_for", "ShardLayout", "shard", "unshard", "ContextParallelPlan",
           "SequenceMask", "InProcessGroup", "TorchTransport", "Transport"]
