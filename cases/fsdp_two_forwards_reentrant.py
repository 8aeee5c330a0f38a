"""torch FSDP: two forwards before one backward with reentrant checkpointing. FSDP2 (fully_shard's hooks inside the
checkpoint) silently reduce-scatters only one forward's part of a layer's gradient; FSDP1 recomputes the other
forward on resharded 1-D parameters ("mat2 must be a matrix, got 1-D tensor").

Report, ready to file (no upstream issue found):

    Title: FSDP2 / FSDP1 + reentrant activation checkpointing + two forwards per backward: a lost gradient / a crash

    FSDP2: with the checkpoint around the sharded layer, checkpoint_wrapper(fully_shard(layer)) (what transformers'
    gradient_checkpointing_enable amounts to under fully_shard, GradientCheckpointingLayer checkpointing its whole
    Module.__call__, fully_shard's hooks included), the real forwards run under
    no_grad, so FSDPParamGroup._register_post_backward_hook returns early and only the recomputes register the
    post-backward. The first recompute's backward reduce-scatters the layer's gradient and leaves the FSDPState
    PRE_BACKWARD; the second recompute takes _pre_forward's PRE_BACKWARD branch ("multiple forward passes before
    backward"), which unshards but registers no post-backward, and the root's final callback skips the group (it is
    POST_BACKWARD). The other forward's gradient stays in unsharded_param.grad, never reduced: the sharded
    gradients differ from the run without checkpointing, silently. fully_shard(checkpoint_wrapper(layer))
    (accelerate's and torchtitan's order for torch's wrapper), non-reentrant
    checkpointing, or one forward per backward train correctly. transformers 5 checkpoints a layer's forward rather
    than its __call__ (fully_shard's hooks outside), so its layers train correctly here; transformers 4 does not.

    FSDP1 (FSDP(checkpoint_wrapper(layer)), use_orig_params=True): the first recompute's backward reaches the flat
    parameter's AccumulateGrad; its post-backward hook reshards, leaving the original parameters 1-D views of the
    local shard; the other forward's pre-backward hook returns at once (handle._ran_pre_backward_hook is cleared
    only in the final callback), so its recompute runs F.linear on a 1-D weight.

Found by the harness (`python -m harness run --parallel fsdp,fsdp1 --recipe two_forwards --gc-mode reentrant`:
mismatch under fsdp, gc_error under fsdp1; equivalent under non_reentrant).

Two ranks on this machine (gloo, 127.0.0.1 only), started by this script; plain torch. Verdict: exit 0 when both
launches train the checkpointed run as the plain one, exit 1 when either does not, exit 2 = cannot run.
"""

AFFECTED = {"torch": ">=2.4"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch>=2.6"]
LINKS = ["https://github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/fsdp/_fully_shard/_fsdp_state.py",
         "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/distributed/fsdp/_runtime_utils.py"]

import json
import os
import socket
import subprocess
import sys

WORLD = 2


def run(rank: int, launch: str, checkpointed: bool) -> dict:
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl, CheckpointWrapper, checkpoint_wrapper)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.tanh(self.lin(x)) + x

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), Block(), Block(), torch.nn.Linear(8, 1))
    wrap = (lambda m: checkpoint_wrapper(m, checkpoint_impl=CheckpointImpl.REENTRANT)) if checkpointed else (lambda m: m)
    if launch == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for i in (1, 2):
            model[i] = wrap(fully_shard(model[i]))
        fully_shard(model)
        params = dict(model.named_parameters())   # the sharded parameters an optimizer holds
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        for i in (1, 2):
            model[i] = wrap(model[i])
        model = FSDP(model, use_orig_params=True, device_id=torch.device("cpu"),
                     auto_wrap_policy=ModuleWrapPolicy({CheckpointWrapper if checkpointed else Block}))
    g = torch.Generator().manual_seed(1)
    views = [torch.randn(4, 4, generator=g)[2 * rank:2 * rank + 2] for _ in range(2)]
    try:
        sum(model(x).pow(2).mean() for x in views).backward()   # two forwards, one backward
    except RuntimeError as exc:
        return {"error": str(exc).splitlines()[0][:100]}
    clean = lambda n: n.replace("_checkpoint_wrapped_module.", "").replace("_fsdp_wrapped_module.", "")
    if launch == "fsdp2":
        return {clean(n): p.grad.full_tensor().flatten().tolist() for n, p in params.items()}
    with FSDP.summon_full_params(model, with_grads=True):
        return {clean(n): p.grad.flatten().tolist() for n, p in model.named_parameters()}


def rank_main(rank: int, port: int) -> int:
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    try:
        out = {launch: {"plain": run(rank, launch, False), "checkpointed": run(rank, launch, True)}
               for launch in ("fsdp2", "fsdp1")}
        print("RESULT " + json.dumps(out), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


def main() -> int:
    import torch

    print(f"torch {torch.__version__}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(port)], env=env, text=True,
                              stdout=subprocess.PIPE) for r in range(WORLD)]
    try:
        outs = [p.communicate(timeout=240)[0] for p in ranks]
    except subprocess.TimeoutExpired:
        print("CANNOT RUN: a rank did not finish in 240 s")
        return 2
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = [json.loads(line[7:]) for out in outs for line in out.splitlines() if line.startswith("RESULT ")]
    if len(results) != WORLD:
        print("CANNOT RUN: a rank did not report")
        return 2
    bug = False
    for launch in ("fsdp2", "fsdp1"):
        plain, got = results[0][launch]["plain"], results[0][launch]["checkpointed"]
        if "error" in plain:
            print(f"CANNOT RUN: {launch}: the plain run fails: {plain['error']}")
            return 2
        if "error" in got:
            print(f"BUG: {launch}: the checkpointed run raises: {got['error']}")
            bug = True
            continue
        worst = max(max(abs(a - b) for a, b in zip(plain[n], got[n])) / max(max(map(abs, plain[n])), 1e-12)
                    for n in plain)
        print(f"{'BUG' if worst > 1e-5 else 'OK'}: {launch}: worst relative gradient difference {worst:.3g}")
        bug = bug or worst > 1e-5
    return 1 if bug else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        sys.exit(rank_main(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(main())
