"""In a rank: what train_recipe asks of the launch through the recipe (harness/launch/__init__.py)."""
from __future__ import annotations

import warnings

from . import DDP_KWARGS, WORLD


# ---- in a rank -------------------------------------------------------------------------------------------------
class Rank:
    """This process's rank of a launch: what train_recipe calls through the recipe (CellRecipe.wrap, grads, state,
    and batch's `part`)."""

    def __init__(self, parallel: str, rank: int, world: int = WORLD):
        self.parallel, self.rank, self.world = parallel, rank, world
        self.note = ""   # how the batch was dealt, where the ranks' averaged gradient is not the whole batch's

    def wrap(self, model):
        import torch

        from ..archs.base import checkpointed_layers

        layers = checkpointed_layers(model)
        if self.parallel in DDP_KWARGS:
            return torch.nn.parallel.DistributedDataParallel(model, **DDP_KWARGS[self.parallel])
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

        # each layer is a unit; where a torch_* gc mode wrapped it, its checkpoint wrapper is: fully_shard and FSDP1
        # around CheckpointWrapper(layer), as accelerate's FSDP plugins (they skip a wrapper's inner module) and
        # torchtitan (checkpointing before sharding) build it
        inside = {id(m._checkpoint_wrapped_module) for m in model.modules() if isinstance(m, CheckpointWrapper)}

        def unit(module) -> bool:
            if isinstance(module, CheckpointWrapper):
                return isinstance(module._checkpoint_wrapped_module, layers)
            return isinstance(module, layers) and id(module) not in inside

        if self.parallel == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for module in [m for m in model.modules() if unit(m)]:
                fully_shard(module)
            fully_shard(model)
            return model
        if self.parallel == "fsdp1":
            import functools

            from torch.distributed.fsdp import FullyShardedDataParallel
            from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

            return FullyShardedDataParallel(model, use_orig_params=True, device_id=torch.device("cpu"),
                                            auto_wrap_policy=functools.partial(lambda_auto_wrap_policy, lambda_fn=unit))
        raise ValueError(f"unknown launch {self.parallel!r}")

    def part(self, batch: dict, rank: int | None = None) -> dict:
        """Rank `rank`'s (this one's) rows of the batch: the k-th of WORLD equal parts of every tensor that holds a
        row per sample. A batch whose tensors do not all hold a row per sample (a vision-language model's flattened
        patches) is trained whole by every rank, as the note says."""
        import torch

        r = self.rank if rank is None else rank
        tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        rows = {v.shape[0] if v.dim() else 0 for v in tensors.values()}
        if len(rows) != 1 or next(iter(rows)) % self.world:
            shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in tensors.items())
            self.note = (f"the batch does not split by row ({shapes}): every rank trains the whole batch, so the "
                         f"ranks' averaged gradient is the single process's")
            return batch
        n = next(iter(rows)) // self.world
        mask = batch.get("attention_mask")
        counts = {int(mask[k * n:(k + 1) * n].sum()) for k in range(self.world)} if isinstance(mask, torch.Tensor) else ()
        if len(counts) > 1:   # a padded row: per-token means of unequal parts
            self.note = (f"each rank trains {n} of the batch's {n * self.world} rows, which hold {sorted(counts)} tokens: "
                         f"a loss averaged over tokens weighs them otherwise than over the whole batch, so the ranks' "
                         f"averaged gradient is not the single process's")
        elif not self.note:
            self.note = (f"each rank trains {n} of the batch's {n * self.world} rows (rank r the r-th {n}): the ranks' "
                         f"averaged gradient is the whole batch's where its loss is a mean over rows of equal weight")
        return {k: (v[r * n:(r + 1) * n] if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}

    def grads(self, forward, named) -> dict:
        """The step's full gradient of each (name, parameter): gathered from the shards under FSDP."""
        from ..train import _snapshot, clean_name

        if self.parallel == "fsdp1":
            from torch.distributed.fsdp import FullyShardedDataParallel

            with FullyShardedDataParallel.summon_full_params(forward, with_grads=True, writeback=False):
                by_name = {clean_name(n): p for n, p in forward.named_parameters()}
                return {n: None if by_name[n].grad is None else _snapshot(by_name[n].grad) for n, _ in named}
        return {n: None if p.grad is None else _snapshot(_full(p.grad)) for n, p in named}

    def state(self, forward, model) -> dict:
        """The final state dict, every tensor whole."""
        from ..train import clean_name, final_state

        if self.parallel == "fsdp1":
            from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType

            with warnings.catch_warnings():   # its deprecation notice: the harness's call, not the user's
                warnings.simplefilter("ignore", FutureWarning)
                with FullyShardedDataParallel.state_dict_type(forward, StateDictType.FULL_STATE_DICT,
                                                              FullStateDictConfig(rank0_only=False)):
                    return {clean_name(k): v.detach().clone() for k, v in forward.state_dict().items()}
        if self.parallel == "fsdp":
            return {k: _full(v).detach().clone() for k, v in model.state_dict().items()}
        return final_state(model)


def _full(t):
    """A DTensor (FSDP2's sharded parameters and gradients) gathered whole; any other tensor as it is."""
    full = getattr(t, "full_tensor", None)
    return full() if callable(full) else t
