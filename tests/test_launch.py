"""The launch axis (harness/launch/): cells trained on two gloo ranks of this machine, as torchrun starts them.

Each worker's rank processes are started once and serve every distributed cell it runs. A rank's faults (a perturbed
recompute, a crash, a hang) are installed in that rank only, by a hook the pool calls around its runs
(launch_pool.HOOKS: "module:function", a context manager; this module is importable in the ranks, which share the
runner's sys.path)."""
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ENV, ROOT, fault_installed, in_recompute
from harness.cells import Cell, SelectionError, find, select
from harness.compare import compare
from harness.launch import pool as launch_pool
from harness.outcomes import Outcome
from harness.run import Options, Runner
from harness.trace import Trace

HERE = Path(__file__).stem   # this module, as the ranks import it


@pytest.fixture
def hooks(monkeypatch):
    """Install rank hooks for one test: {rank: function name in this module}."""
    def install(**by_rank):
        monkeypatch.setattr(launch_pool, "HOOKS", {int(r[1:]): f"{HERE}:{name}" for r, name in by_rank.items()})
    return install


@pytest.fixture(scope="module")
def runner():
    return Runner(Options(), cache_size=64)


def cell(backend="full", arch="bert", gc_mode="non_reentrant", parallel="ddp", recipe="loop", order="gc_first",
         inputs="masked") -> Cell:
    method = "full" if backend == "full" else "lora"
    return next(c for c in select(backend=backend, arch=arch, method=method, gc_mode=gc_mode, inputs=inputs,
                                  order=order, recipe=recipe, parallel=parallel))


# ---- hooks the ranks run (no arguments; each a context manager) -----------------------------------------------
def perturbed_recompute():
    """The recompute starts from inputs a relative 1e-4 off the forward's."""
    def fake(real, fn, *a, **kw):
        def again(*x, **k):
            if in_recompute():
                x = tuple(v * (1 + 1e-4) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in x)
            return fn(*x, **k)
        return real(again, *a, **kw)
    return fault_installed(fake)


def killed_in_recompute():
    """The rank dies (SIGKILL) when its checkpointed run first recomputes."""
    def fake(real, fn, *a, **kw):
        def again(*x, **k):
            if in_recompute():
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*x, **k)
        return real(again, *a, **kw)
    return fault_installed(fake)


def hangs_in_recompute():
    """The rank stops answering when its checkpointed run recomputes, deaf to its own time limit (SIGALRM blocked):
    only the runner's deadline ends it."""
    def fake(real, fn, *a, **kw):
        def again(*x, **k):
            if in_recompute():
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
                while True:
                    time.sleep(3600)
            return fn(*x, **k)
        return real(again, *a, **kw)
    return fault_installed(fake)


@contextlib.contextmanager
def no_dropout():
    """Models built without dropout (every nn.Dropout at p=0, every float `*dropout*` attribute at 0): a rank's half
    batch then draws no other masks than the whole batch does in one process."""
    from harness import train
    from harness.archs import base

    real = base.build_model

    def build(*a, **k):
        model = real(*a, **k)
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
            for name, value in list(vars(m).items()):
                if "dropout" in name and isinstance(value, float):
                    setattr(m, name, 0.0)
        return model
    base.build_model = train.build_model = build
    try:
        yield
    finally:
        base.build_model = train.build_model = real


# ---- the tests ------------------------------------------------------------------------------------------------
def test_the_axis_is_in_the_id_only_where_it_is_not_one_process():
    single, ddp = cell(parallel="single"), cell(parallel="ddp")
    assert single.id == "full-bert-full-non_reentrant-masked-gc_first"
    assert ddp.id == single.id + "-ddp" and ddp.baseline_key == single.baseline_key + "-ddp"
    assert find(ddp.id) == ddp
    trainer = cell(backend="peft", parallel="ddp", recipe="trainer", order="adapter_first")
    assert trainer.id.endswith("-trainer-ddp")
    with pytest.raises(SelectionError, match="Trainer launches on several ranks as itself"):
        select(backend="peft", arch="bert", method="lora", recipe="trainer", parallel="fsdp")


@pytest.mark.parametrize("arch", ["llama", "bert"])
def test_the_plain_ranks_average_to_the_single_process_gradient(monkeypatch, hooks, arch):
    """Each rank trains its half of the batch; averaged, the plain 2-rank gradient is the whole batch's in one
    process (dropout off, which would draw other masks for a half batch), at every step."""
    hooks(r0="no_dropout", r1="no_dropout")
    o = Options()
    ranks = launch_pool.train_ranks(cell(arch=arch, parallel="ddp"), None, o)
    with no_dropout():
        one = Runner(o).plain(cell(arch=arch, parallel="single"))
    assert ranks.ok and one.ok, (ranks.error, one.error)
    assert "each rank trains 1 of the batch's 2 rows" in ranks.launch
    for step, grads in enumerate(one.grads):
        assert abs(sum(r.losses[step] for r in ranks.ranks) / 2 - one.losses[step]) < 1e-5
        for name, g in grads.items():
            for r in ranks.ranks:
                torch.testing.assert_close(r.grads[step][name], g, atol=1e-6, rtol=1e-4, msg=f"{step} {name}")


def test_a_padded_batch_says_its_ranks_do_not_average_to_the_whole_batch(runner):
    r = runner.run_cell(cell(arch="llama", inputs="padded"))
    assert "a loss averaged over tokens weighs them otherwise" in r["launch"], r["launch"]


def test_a_fault_in_one_rank_only_is_caught(hooks, runner):
    hooks(r1="perturbed_recompute")
    r = runner.run_cell(cell(arch="bert", parallel="ddp"))
    assert r["outcome"] == "mismatch", r["detail"]


@pytest.mark.parametrize("parallel", ["fsdp", "fsdp1"])
def test_a_fault_in_one_rank_of_a_sharded_launch_is_caught(hooks, runner, parallel):
    hooks(r1="perturbed_recompute")
    r = runner.run_cell(cell(arch="llama", parallel=parallel))
    assert r["outcome"] == "mismatch", r["detail"]


def test_ranks_that_diverge_are_a_finding_of_their_own():
    """The checkpointed ranks hold other gradients than each other where the baseline's agree: said first."""
    def run(g0, g1, segments=0, saved=4000):
        return launch_pool.merged([Trace(losses=[float(r)], grads=[{"w": g}], state={"w": torch.tensor([0.9])},
                                    trainable=["w"], recomputed_segments=segments, saved_bytes=saved)
                              for r, g in enumerate((torch.tensor([g0]), torch.tensor([g1])))])
    v = compare(run(1.0, 1.0), None, run(1.0, 1.5, 2, 1000))
    assert v.outcome is Outcome.MISMATCH, v.detail
    assert v.detail.startswith("ranks diverge with checkpointing, the baseline's agree (step 0 grad w differs "
                               "between rank 0 and rank 1 by 0.5); rank 1: first at step 0 grad w"), v.detail
    v = compare(run(1.0, 1.5), None, run(1.0, 1.5, 2, 1000))   # the launch's own: its baseline's ranks differ too
    assert v.outcome is Outcome.EQUIVALENT and "diverge" not in v.detail, v.detail


@pytest.mark.versionless   # the rank pool's own handling (the same torch in every env)
def test_a_rank_that_dies_is_the_cells_outcome_and_the_pool_starts_again(hooks, runner):
    hooks(r1="killed_in_recompute")
    r = runner.run_cell(cell(arch="bert", parallel="ddp_static"))
    assert r["outcome"] == "gc_error" and "rank 1 killed by signal 9" in r["detail"], r["detail"]
    hooks()
    assert runner.run_cell(cell(arch="bert", parallel="ddp_static", gc_mode="reentrant"))["outcome"] == "equivalent"


@pytest.mark.versionless   # the rank pool's own handling (the same torch in every env)
def test_a_rank_that_hangs_is_stopped_at_its_deadline(hooks, monkeypatch):
    monkeypatch.setattr(launch_pool, "GRACE", 1.0)
    hooks(r0="hangs_in_recompute")
    starts = launch_pool.pool().starts
    r = Runner(Options(timeout=10.0)).run_cell(cell(arch="bert", parallel="ddp", gc_mode="reentrant"))
    assert r["outcome"] == "gc_error" and "did not answer within 11 s" in r["detail"], r["detail"]
    assert launch_pool.pool().starts > starts   # the hung ranks ended; the baseline's replay started new ones


@pytest.mark.versionless   # the rank pool's own handling (the same torch in every env)
def test_the_ranks_are_started_once_and_reused(runner):
    runner.run_cell(cell(arch="bert", parallel="ddp"))
    pids = [p.pid for p in launch_pool.pool().procs]
    for parallel in ("ddp_find_unused", "fsdp", "fsdp1"):
        runner.run_cell(cell(arch="bert", parallel=parallel))
    assert [p.pid for p in launch_pool.pool().procs] == pids


def _addresses(pid: int) -> set[str]:
    """The addresses of process `pid`'s TCP sockets, each end (its fds' socket inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    out = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:   # a listening socket's remote address is none (all zeros)
                out |= {fields[1].rpartition(":")[0]} | ({fields[2].rpartition(":")[0]} if fields[3] != "0A" else set())
    return out


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


@pytest.mark.versionless   # the rank pool's own handling (the same torch in every env)
def test_the_ranks_rendezvous_and_talk_on_the_loopback_interface_only(runner):
    """The rendezvous is a store the runner hosts on 127.0.0.1, on a port the OS picks (no port to race for or
    find taken); gloo's connections are on the loopback interface: no rank reaches another address."""
    runner.run_cell(cell(arch="bert", parallel="ddp"))
    pool = launch_pool.pool()
    assert pool.store.host == "127.0.0.1" and pool.store.port > 0
    for proc in pool.procs:
        seen = _addresses(proc.pid)
        assert seen and seen <= LOOPBACK, seen


def _ranks_of(pid: int) -> list[int]:
    """The rank processes a runner process `pid` started (their environment names it)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"harness.launch" in cmd and f"HARNESS_PARENT={pid}".encode() in env:
            out.append(int(entry.name))
    return out


@pytest.mark.versionless   # the rank pool's own handling (the same torch in every env)
def test_sigterm_leaves_no_rank_behind_and_resume_finishes_the_run(tmp_path):
    out = tmp_path / "run.json"
    args = [sys.executable, "-m", "harness", "run", "--backend", "full", "--arch", "bert", "--parallel", "ddp",
            "--gc-mode", "non_reentrant", "--inputs", "masked,unmasked", "--task", "seq_cls", "--recipe", "loop",
            "--json", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, cwd=ROOT)
    try:
        for line in proc.stdout:   # the first cell's line: the ranks are up and serving
            if "full-bert-full-" in line:
                break
        ranks = _ranks_of(proc.pid)
        assert len(ranks) == 2, ranks
        proc.send_signal(signal.SIGTERM)
        rest = proc.stdout.read()
        assert proc.wait(timeout=300) == 1, rest
    finally:
        proc.kill()
    assert "# interrupted after" in rest
    for pid in ranks:   # each rank is gone, not merely orphaned
        assert not Path(f"/proc/{pid}").exists() or b"zombie" in Path(f"/proc/{pid}/status").read_bytes().lower()
    done = subprocess.run(args + ["--resume"], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "# resuming:" in done.stdout


@pytest.mark.parametrize("args, needle", [
    (["--parallel", "ddp2"], "unknown parallel 'ddp2'; did you mean 'ddp'?"),
    (["--parallel", "fsdp", "--recipe", "trainer"], "Trainer launches on several ranks as itself"),
])
def test_bad_launches_are_refused_in_one_line_before_anything_runs(capsys, args, needle):
    from harness import cli

    assert cli.main(["run", "--backend", "full", "--arch", "bert", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err
