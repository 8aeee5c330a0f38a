"""The runner's side of a launch: the rank processes (RankPool), the seam train_ranks, and a rank's process
(`python -m harness.launch.pool RANK FD`). See harness/launch/__init__.py."""
from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import socket
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait

from . import GRACE, LEAVE_ON_ERROR, PEER_GONE, START_TIMEOUT, STRAGGLER, STRAGGLER_MIN, WORLD
from .rank import Rank


# ---- the runner's side -----------------------------------------------------------------------------------------
class LaunchError(RuntimeError):
    """The ranks could not be started or could not form their group."""


def _send(conn: Connection, message) -> None:
    conn.send_bytes(pickle.dumps(message))   # plain pickles: tensors by value, no shared memory


def _recv(conn: Connection):
    return pickle.loads(conn.recv_bytes())


class RankPool:
    """WORLD rank processes (python -m harness.launch.pool), their process group formed, serving training runs."""

    def __init__(self, world: int = WORLD):
        self.world = world
        self.procs: list = []
        self.conns: list[Connection] = []
        self.logs: list = []
        self.store = None        # the rendezvous (a TCPStore this process hosts on 127.0.0.1)
        self.generation = 0      # of the process group, formed anew after a run that raised
        self.starts = 0          # how many times the ranks were started

    @property
    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def start(self) -> None:
        import subprocess

        import torch.distributed as dist

        self.close()
        self.starts += 1
        # the rendezvous on a loopback port the OS picks, held by this process: no port to race for or find taken
        self.store = dist.TCPStore("127.0.0.1", 0, self.world + 1, is_master=True, wait_for_workers=False)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(self.store.port), GLOO_SOCKET_IFNAME="lo", WORLD_SIZE=str(self.world),
                   LOCAL_WORLD_SIZE=str(self.world), HARNESS_PARENT=str(os.getpid()))
        for r in range(self.world):
            mine, theirs = socket.socketpair()
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen([sys.executable, "-m", "harness.launch.pool", str(r), str(theirs.fileno())],
                                    env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), pass_fds=[theirs.fileno()],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
            theirs.close()
            self.procs.append(proc)
            self.conns.append(Connection(mine.detach()))
            self.logs.append(log)
        answers = self._answers(START_TIMEOUT)   # the libraries imported
        if any(kind != "imported" for kind, _ in answers):
            self.close()
            raise LaunchError(next(info for kind, info in answers if kind != "imported"))
        self.group()

    def group(self) -> None:
        """Form a new process group (a new generation of the rendezvous: the last one was torn down)."""
        self.generation += 1
        for conn in self.conns:
            _send(conn, ("group", self.generation))
        answers = self._answers(START_TIMEOUT)
        if not all(kind == "grouped" for kind, _ in answers):
            self.close()
            raise LaunchError("the ranks could not form a process group on 127.0.0.1: "
                              + next(info for kind, info in answers if kind != "grouped"))

    def _answers(self, seconds: float, lockstep: bool = False) -> list:
        """Every rank's next message, as (kind, payload); ("dead", why) for a rank that ended, ("late", why) for one
        that did not answer within `seconds`. `lockstep`: the ranks run in step (a training run, whose collectives
        hold them together), so a rank still running STRAGGLER x the first answer's time after it (at least
        STRAGGLER_MIN s) waits in a collective its peers did not enter: their runs took other paths."""
        out: list = [None] * self.world
        pending = set(range(self.world))
        start = time.monotonic()
        deadline = start + seconds
        first = ""
        while pending:
            ready = wait([self.conns[r] for r in pending], timeout=max(deadline - time.monotonic(), 0))
            if not ready:
                for r in pending:
                    out[r] = ("late", first.format(r=r) or f"rank {r} did not answer within {seconds:.0f} s")
                break
            for conn in ready:
                r = self.conns.index(conn)
                try:
                    out[r] = _recv(conn)
                except (EOFError, OSError):
                    out[r] = ("dead", self._death(r))
                pending.discard(r)
                if lockstep and not first and pending:
                    more = max(STRAGGLER * (time.monotonic() - start), STRAGGLER_MIN)
                    first = (f"rank {{r}} did not answer {more:.0f} s after rank {r} did: it waits in a collective "
                             f"rank {r} did not enter (the ranks' runs took other paths)")
                    deadline = min(deadline, time.monotonic() + more)
        return out

    def _death(self, r: int) -> str:
        """Why rank `r` ended: its exit status and the last lines it wrote (faulthandler's traceback of a crash)."""
        proc = self.procs[r]
        try:
            code = proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - still running with its connection closed: taken down below
            code = None
        log = self.logs[r]
        log.seek(0, os.SEEK_END)
        log.seek(max(log.tell() - 4000, 0))
        tail = [ln for ln in log.read().decode(errors="replace").splitlines() if ln.strip()][-6:]
        how = (f"killed by signal {-code}" if code is not None and code < 0 else f"exited with {code}")
        return f"rank {r} {how}: " + " | ".join(ln.strip() for ln in tail)

    def train(self, payload: dict, seconds: float) -> list:
        """One training run on every rank: each rank's Trace (an error Trace for a rank that died or hung)."""
        from ..trace import Trace

        if not self.alive:
            self.start()
        for conn in self.conns:
            _send(conn, ("train", payload))
        traces, lost = [], False
        for kind, info in self._answers(seconds, lockstep=True):
            if kind in ("trace", "left"):
                traces.append(info)
                lost = lost or kind == "left"
                continue
            lost = True
            name = "CellTimeout" if kind == "late" else "RankDied"
            traces.append(Trace(error=f"train: {name}: {info}", error_stage="train"))
        if lost:
            self.close()   # a rank ended or hangs: the next run starts the ranks again
        elif not all(t.ok for t in traces):
            self.group()   # the ranks that raised tore their group down: a new one for the next run
        return traces

    def close(self) -> None:
        """Tell the ranks to stop; end them if they do not; nothing is left running."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                _send(conn, ("stop", None))
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                proc.kill()
                proc.wait()
        for conn in self.conns:
            conn.close()
        for log in self.logs:
            log.close()
        self.procs, self.conns, self.logs, self.store = [], [], [], None


_POOL: RankPool | None = None
HOOKS: dict[int, str] = {}   # rank -> "module:function" called around its runs (a context manager): tests' faults


def pool() -> RankPool:
    """This process's rank pool, made at its first distributed cell and closed at exit."""
    global _POOL
    if _POOL is None:
        _POOL = RankPool()
        atexit.register(_POOL.close)
    return _POOL


def merged(traces: list):
    """One Trace of a run over several ranks: rank 0's fields, every rank's trace in `ranks`; the error of the first
    rank that failed of its own (not because its peer went away), with the rank and where it was raised."""
    import dataclasses

    first = traces[0]
    out = dataclasses.replace(first, ranks=traces, magnitudes=None, differences=None)
    out.warnings = sorted({w for t in traces for w in t.warnings})
    out.launch = next((t.launch for t in traces if t.launch), "")
    failed = [(r, t) for r, t in enumerate(traces) if not t.ok]
    if failed:
        r, t = next(((r, t) for r, t in failed if not any(k in t.error for k in PEER_GONE)), failed[0])
        stage, _, rest = t.error.partition(": ")
        out.error = f"{stage}: rank {r}: {rest}" + (f" (at {t.where})" if t.where else "")
        out.error_stage, out.unsupported, out.where = t.error_stage, t.unsupported, t.where
    return out


def train_ranks(cell, gc_mode, options, cache: bool = True):
    """A training run of a distributed cell (the runner's seam): every rank's Trace, merged."""
    from .. import own
    from ..trace import Trace

    payload = {"cell": cell, "gc_mode": gc_mode, "options": options, "cache": cache, "own": own.installed(),
               "hooks": dict(HOOKS)}
    try:
        traces = pool().train(payload, (options.timeout or 3600.0) + GRACE)
    except LaunchError as exc:
        return Trace(error=f"launch: LaunchError: {exc}", error_stage="launch")
    return merged(traces)


# ---- a rank's process ------------------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """End when the process that started the rank ends, however it ends (Linux's PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    if str(os.getppid()) != os.environ.get("HARNESS_PARENT", str(os.getppid())):
        os._exit(1)   # the parent ended before the call above


def _train_here(payload: dict, rank: int, world: int):
    from .. import own
    from ..cells import resolve
    from ..trace import Trace
    from ..train import train

    cell, o = payload["cell"], payload["options"]
    try:
        own.reinstall(payload["own"])
        arch, be, method = resolve(cell)
        launch = Rank(cell.parallel, rank, world)
        with _hooked(payload["hooks"].get(rank)):
            trace = train(arch, cell.task, be, method, inputs=cell.inputs, gc_mode=payload["gc_mode"],
                          order=cell.order, steps=o.steps, seed=o.seed, lr=o.lr, dtype=o.dtype, device=o.device,
                          timeout=o.timeout, cache=payload["cache"], training=cell.recipe, launch=launch)
        trace.launch = launch.note
        return trace
    except Exception as exc:  # noqa: BLE001 - a cell's own failure, reported as its trace
        return Trace(error=f"launch: {type(exc).__name__}: {exc}", error_stage="launch")


@contextlib.contextmanager
def _hooked(spec: str | None):
    if not spec:
        yield
        return
    import importlib

    module, _, name = spec.partition(":")
    with getattr(importlib.import_module(module), name)():
        yield


def _tear_down() -> None:
    """End this rank's process group: its connections close, so a peer waiting in one of its collectives raises at
    once ("Connection closed by peer")."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.distributed_c10d._get_default_group().shutdown()
        dist.destroy_process_group()


def _group(generation: int, rank: int, world: int) -> tuple[str, str]:
    """A new process group over gloo, its rendezvous the runner's store (MASTER_ADDR:MASTER_PORT), this generation's
    keys."""
    import datetime

    import torch.distributed as dist

    _tear_down()
    try:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world + 1, is_master=False,
                              timeout=datetime.timedelta(seconds=START_TIMEOUT))
        dist.init_process_group("gloo", store=dist.PrefixStore(f"group{generation}/", store), rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=START_TIMEOUT))
    except Exception as exc:  # noqa: BLE001
        return "failed", f"{type(exc).__name__}: {exc}"
    return "grouped", ""


def main(argv: list[str]) -> int:
    rank, fd = int(argv[0]), int(argv[1])
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C is the runner's to handle
    import faulthandler
    import gc

    faulthandler.enable()
    conn = Connection(fd)
    world = int(os.environ["WORLD_SIZE"])
    try:
        import torch
        import torch.distributed  # noqa: F401

        from .. import backends
        from ..train import train  # noqa: F401

        for name in backends.BACKEND_NAMES:   # the libraries imported once, before the first run
            backends.get(name)
        torch.set_num_threads(1)
        gc.set_threshold(100_000, 50, 100)
        gc.collect()
        gc.freeze()
    except Exception as exc:  # noqa: BLE001
        _send(conn, ("failed", f"rank {rank} cannot import the libraries: {type(exc).__name__}: {exc}"))
        return 1
    _send(conn, ("imported", ""))
    import torch.distributed as dist

    while True:
        try:
            kind, payload = _recv(conn)
        except (EOFError, OSError):
            break
        if kind == "stop":
            break
        if kind == "group":
            _send(conn, _group(payload, rank, world))
        elif kind == "train":
            torch.set_num_threads(payload["options"].threads)
            trace = _train_here(payload, rank, world)
            if trace.ok or not dist.is_initialized():
                _send(conn, ("trace", trace))
            elif payload["cell"].parallel in LEAVE_ON_ERROR:
                _send(conn, ("left", trace))
                os._exit(0)   # its connections close with the process: a peer in a collective is released
            else:
                _tear_down()   # a peer waiting in a collective is released ("Connection closed by peer")
                _send(conn, ("trace", trace))
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
