"""The launch: how a cell's training spans processes, its `parallel` axis (docs/design.md, "The launch").

`single` trains in the runner's own process, as every cell did before the axis. Every other value trains on WORLD
rank processes of this machine, as `torchrun --nproc_per_node 2` starts them: torchrun's environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT), torch.distributed over gloo on the loopback interface
only (GLOO_SOCKET_IFNAME=lo; the rendezvous a TCPStore the runner hosts on 127.0.0.1, on a port the OS picks), each
rank its half of the cell's batch.

Three modules:

- here, the axis as data: its values (PARALLEL), which recipes each applies to, Trainer's own launch;
- in a rank (`rank.py`): :class:`Rank`, what train_recipe asks of the launch through the recipe: wrap the model as the launch
  does (DDP, fully_shard, FSDP), deal the batch's rows, gather the full gradients and the full final state.
- in the runner's process (`pool.py`): :class:`RankPool`, the rank processes, started once per process (a pytest-xdist worker,
  a `harness run`) and reused by every distributed cell it runs: each training run of a cell is one request, each
  rank answers with its Trace. A rank whose run raises tears its process group down (so that a peer waiting in a
  collective is released at once, "Connection closed by peer"), and the pool forms a new group before the next
  request (under FSDP2 the rank ends its process instead: LEAVE_ON_ERROR); a rank that dies or does not answer in time ends the pool, which starts again for the next request. A
  rank process ends with the runner's process (PR_SET_PDEATHSIG), at the end of its connection, or when told.

The runner's one seam is :func:`pool.train_ranks`: a training run of a distributed cell, as one Trace (rank 0's, with
every rank's in `ranks`), which the comparator compares rank by rank.
"""
from __future__ import annotations

WORLD = 2
SINGLE = "single"
# the values of the axis: what each launch does (harness list shows them)
PARALLEL = {
    SINGLE: "one process",
    "ddp": "torch.nn.parallel.DistributedDataParallel(model) with its defaults (find_unused_parameters=False), 2 ranks",
    "ddp_find_unused": "DistributedDataParallel(model, find_unused_parameters=True): what Trainer picks for a model "
                       "that is not a PreTrainedModel (a PeftModel, an adapters model), and what scripts set for "
                       "frozen-weight fine-tuning",
    "ddp_static": "DistributedDataParallel(model, static_graph=True): the documented remedy for checkpointing under "
                  "DDP",
    "fsdp": "FSDP2: torch.distributed.fsdp.fully_shard on each checkpointed layer (or its checkpoint wrapper), then "
            "on the root",
    "fsdp1": "FullyShardedDataParallel(model, use_orig_params=True, device_id=cpu) with each checkpointed layer (or "
             "its checkpoint wrapper) a unit, as transformer_auto_wrap_policy on the layer class and accelerate's FSDP "
             "plugin wrap it",
}
DDP_KWARGS = {"ddp": {}, "ddp_find_unused": {"find_unused_parameters": True}, "ddp_static": {"static_graph": True}}
# the trainer recipe on several ranks is Trainer's own launch: it wraps DDP itself, with its own find_unused_parameters
TRAINER = {SINGLE: "", "ddp": "transformers' Trainer on 2 ranks as torchrun starts it (ddp_backend='gloo', use_cpu=True): "
                              "Trainer wraps the model in DDP itself, with find_unused_parameters of its own choosing "
                              "(not is_gradient_checkpointing for a PreTrainedModel, True for any other model)"}
# gloo's errors on a rank whose peer failed first, and a rank left waiting for it: consequences, not causes
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "waits in a collective")
# launches whose rank, when its run raised, ends its process rather than its process group: FSDP2's device meshes
# outlive the model (DTensor's sharding cache holds them) and with them the group's connections, so a peer waiting
# in one of its all-gathers would wait on; the process's end closes them, and the pool starts anew
LEAVE_ON_ERROR = ("fsdp",)
GRACE = 60.0          # seconds beyond a run's own time limit before its ranks are taken to hang
STRAGGLER, STRAGGLER_MIN = 10.0, 30.0   # how long a rank may run on after another answered: x its time, at least
START_TIMEOUT = 600.0  # seconds for the ranks to import the libraries and form their group (a loaded machine)


def parallel_applies(parallel: str, recipe: str) -> str | None:
    """None when a cell of `recipe` can run under the launch `parallel`, else why not."""
    if parallel == SINGLE:
        return None
    if recipe == "trainer" and parallel not in TRAINER:
        return (f"Trainer launches on several ranks as itself (parallel ddp: its own DDP settings); {parallel} is not "
                f"how Trainer is launched")
    return None
