"""torch DDP + transformers: DistributedDataParallel(find_unused_parameters=True) with reentrant gradient
checkpointing raises "Expected to mark a variable ready only once" — what Trainer picks for a PeftModel.

Known upstream (pytorch#24005, open since 2019; torch's DDP note says reentrant checkpointing works only without
find_unused_parameters). Mechanism: at the end of each forward, DDP with find_unused_parameters=True walks the
outputs' autograd graph for the parameters that took part (Reducer.prepare_for_backward); the reentrant checkpoint
ran the layers under no_grad, so their parameters are not in that graph and are marked ready as unused at once; the
recompute in backward uses them and their gradient hooks mark them ready a second time. Trainer wraps DDP with
find_unused_parameters=True for any model that is not a PreTrainedModel (a PeftModel, an adapters model) unless
ddp_find_unused_parameters is set, so `torchrun` + Trainer + LoRA + gradient_checkpointing_kwargs={"use_reentrant":
True} hits it. static_graph=True, find_unused_parameters=False or use_reentrant=False avoid it.

Found by the harness (`python -m harness run --parallel ddp_find_unused --gc-mode reentrant,torch_reentrant`:
gc_error, every backend that recomputes).

Two ranks on this machine (gloo, 127.0.0.1 only), started by this script. Verdict: exit 0 when the checkpointed
DDP run trains, exit 1 when it raises, exit 2 = cannot run. Standalone: imports only torch / transformers.
"""

AFFECTED = {"torch": ">=1.6"}  # PEP 440 specifiers; bug present when ALL match
REQUIRES = ["torch>=2.1", "transformers"]
LINKS = ["https://github.com/pytorch/pytorch/issues/24005",
         "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/nn/parallel/distributed.py"]

import os
import socket
import subprocess
import sys

WORLD = 2


def rank_main(rank: int, port: int) -> int:
    import datetime

    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(1 + rank))
    try:
        ddp(input_ids=ids, labels=ids).loss.backward()
    except RuntimeError as exc:
        print(f"rank {rank}: {str(exc).splitlines()[0][:90]}", flush=True)
        return 1
    finally:
        dist.destroy_process_group()
    return 0


def main() -> int:
    import torch
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(port)], env=env) for r in range(WORLD)]
    try:
        codes = [p.wait(timeout=240) for p in ranks]
    except subprocess.TimeoutExpired:
        print("CANNOT RUN: a rank did not finish in 240 s")
        return 2
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(c not in (0, 1) for c in codes):
        print(f"CANNOT RUN: the ranks exited with {codes}")
        return 2
    if any(codes):
        print("BUG: DDP(find_unused_parameters=True) with reentrant checkpointing cannot train a step")
        return 1
    print("OK: the checkpointed DDP step trains")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        sys.exit(rank_main(int(sys.argv[2]), int(sys.argv[3])))
    sys.exit(main())
