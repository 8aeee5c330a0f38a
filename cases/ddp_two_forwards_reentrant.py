"""torch DDP: two forwards before one backward with reentrant checkpointing silently averages only part of the
gradient (the ranks diverge) under DistributedDataParallel's defaults.

Report, ready to file (no upstream issue found; pytorch#24005 is the find_unused_parameters=True error):

    Title: DDP + reentrant checkpoint + two forwards per backward: part of the gradient is never all-reduced, no error

    A step that runs the DDP model twice (two batches: chosen / rejected, two augmentations, a consistency term),
    sums the losses and calls backward once is supported by DDP without checkpointing. With each layer
    checkpointed reentrantly (torch.utils.checkpoint(use_reentrant=True), transformers' default on 4.x, or
    checkpoint_wrapper(CheckpointImpl.REENTRANT)), each layer's recompute runs a nested torch.autograd.backward, a
    graph task of its own, and a parameter used by both forwards fires the Reducer's autograd hook once per
    forward. When every bucket is complete inside one of these inner backwards, the Reducer queues
    finalize_backward on that inner graph task: it runs when that inner backward returns, copies the averaged
    buckets into .grad and sets expect_autograd_hooks_ = false. The other forward's recompute then accumulates its
    gradient into .grad locally; its hooks return early (`if (!expect_autograd_hooks_) return;`), so that part is
    never all-reduced nor divided by the world size. Rank r ends with mean(g_forward2) + g_forward1[r]: the ranks'
    gradients differ from each other and from the run without checkpointing, and the replicas drift apart, with no
    error or warning. (Where a parameter outside the checkpointed layers trains and both forwards use it, the late
    hooks come while the Reducer still expects them and it raises "Expected to mark a variable ready only once".)
    static_graph=True, use_reentrant=False, or one forward per backward train correctly.

Found by the harness (`python -m harness run --parallel ddp --recipe two_forwards --gc-mode reentrant`: mismatch,
"ranks diverge with checkpointing, the baseline's agree"; equivalent under ddp_static and non_reentrant).

Two ranks on this machine (gloo, 127.0.0.1 only), started by this script; plain torch. Verdict: exit 0 when the
checkpointed DDP gradients equal the plain DDP ones, exit 1 when they differ, exit 2 = cannot run.
"""

AFFECTED = {"torch": ">=1.11"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch>=2.1"]
LINKS = ["https://github.com/pytorch/pytorch/blob/v2.13.0/torch/csrc/distributed/c10d/reducer.cpp",
         "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/utils/checkpoint.py"]

import json
import os
import socket
import subprocess
import sys

WORLD = 2


def grads(rank: int, checkpointed: bool) -> dict:
    import torch
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.tanh(self.lin(x)) + x

    class Model(torch.nn.Module):   # frozen input and output layers, trained blocks: as LoRA trains a decoder
        def __init__(self):
            super().__init__()
            self.inp, self.out = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
            self.blocks = torch.nn.ModuleList([Block(), Block()])
            self.inp.requires_grad_(False), self.out.requires_grad_(False)

        def forward(self, x):
            h = self.inp(x).requires_grad_(True)   # what enable_input_require_grads does
            for block in self.blocks:
                h = checkpoint(block, h, use_reentrant=True) if checkpointed else block(h)
            return self.out(h)

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Model())
    g = torch.Generator().manual_seed(1)
    views = [torch.randn(4, 4, generator=g)[2 * rank:2 * rank + 2] for _ in range(2)]   # two views, this rank's rows
    sum(model(x).pow(2).mean() for x in views).backward()   # two forwards, one backward
    return {n: p.grad.flatten().tolist() for n, p in model.named_parameters() if p.grad is not None}


def rank_main(rank: int, port: int) -> int:
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    try:
        print("RESULT " + json.dumps({"plain": grads(rank, False), "checkpointed": grads(rank, True)}), flush=True)
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
    worst, where = 0.0, ""
    for r, res in enumerate(results):
        for name, plain in res["plain"].items():
            got = res["checkpointed"][name]
            diff = max(abs(a - b) for a, b in zip(plain, got)) / max(max(map(abs, plain)), 1e-12)
            if diff > worst:
                worst, where = diff, f"rank {r} {name}"
    apart = max(abs(a - b) for n in results[0]["checkpointed"]
                for a, b in zip(results[0]["checkpointed"][n], results[1]["checkpointed"][n]))
    print(f"worst relative gradient difference {worst:.3g} ({where}); ranks' checkpointed gradients apart by {apart:.3g}")
    if worst > 1e-5:
        print("BUG: with reentrant checkpointing DDP averages only part of the two forwards' gradient, silently")
        return 1
    print("OK: the checkpointed DDP gradients equal the plain ones")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        sys.exit(rank_main(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(main())
