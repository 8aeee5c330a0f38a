"""The cost of a cell against its pure training compute and against the libraries' own checkpointing tests, side by
side in one process (a benchmark, not a test).

    python benchmarks/anchors.py [--repeat 3] [--part pure,libraries,run] [CELL_ID ...]

`pure`: for each cell (default: a sample of plain-loop cells of the adapters, peft and full backends), the fastest
of `--repeat` timings, the variants timed in turns, of
- harness: `Runner.run_cell` with an empty baseline cache (the plain baseline, the checkpointed run, probes, the
  compare; the replay and a float64 rerun where the two runs differ), a cell that shares its baseline with none;
- pure: the same plain and checkpointed trainings by `harness repro --minimal`'s loop (the user's calls, the SGD
  steps, no probe, no replay, no compare), the compute any checkpointing test of the cell pays;
and the same for the cell's run: its variants that share one baseline (every gc mode and order, as a `harness run`
of the cell's arch and method makes them) by one Runner, against one pure plain run and each variant's checkpointed
one. Then harness / pure per cell, per run and over the sample.

`libraries`: the harness's cell of the libraries' own setting (checkpointing enabled after the adapter) against
each library's checkpointing test re-done on the cell's tiny model and adapter, in the cell's process:
- adapters (tests/test_methods/method_test_impl/base.py, `_run_gradient_checkpointing_test_helper`): seed 42, the
  adapter added and trained (`train_adapter`), `model.gradient_checkpointing_enable()` in one of two runs,
  `AdapterTrainer` with learning rate 1.0, 8 steps of batch 1 and 2 accumulation steps, then the two state dicts
  `torch.equal`. Its model has a flex head (`AutoAdapterModel`) and MRPC batches; here the cell's model and batches;
- peft (tests/testing_common.py, `_test_training_gradient_checkpointing`, once per `use_reentrant`): a forward and
  backward of `(output[0] ** 2).sum()`, then `prepare_model_for_gradient_checkpointing` and
  `gradient_checkpointing_enable`, a forward and backward again; the parameters whose gradient sum is above
  1e-6 x the mean must agree (no value is compared). Its test removes dropout; here the cell's model keeps it.
What each compares is printed beside its time: the adapters test trains 8 steps and compares the final state only,
bit for bit; peft's compares which gradients are non-zero after one backward; a cell compares every step's loss and
gradients, the final state and the saved memory.

`run`: the share of a `harness run` of peft LoRA on BERT, Llama, T5 spent outside its cells (selection, report).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LIBRARY_PAIRS = ("adapters-bert-seq_bn-non_reentrant-masked-adapter_first",
                 "adapters-bert-lora-non_reentrant-masked-adapter_first",
                 "adapters-llama-lora-non_reentrant-masked-adapter_first",
                 "peft-llama-lora-non_reentrant-masked-adapter_first", "peft-llama-lora-reentrant-masked-adapter_first",
                 "peft-gpt2-lora-non_reentrant-masked-adapter_first", "peft-gpt2-lora-reentrant-masked-adapter_first")
SAMPLE = ("adapters-bert-seq_bn-non_reentrant-masked-gc_first", "adapters-llama-lora-non_reentrant-masked-gc_first",
          "peft-bert-lora-non_reentrant-masked-gc_first", "peft-llama-lora-non_reentrant-masked-gc_first",
          "peft-t5-ia3-non_reentrant-masked-gc_first", "full-gpt2-full-non_reentrant-masked-gc_first",
          "full-vit-full-non_reentrant-unmasked-gc_first")


def pure_runner(cell_id: str):
    """The minimal script's `train` for this cell (its module namespace, not run as a script)."""
    from harness.repro import minimal_script

    namespace: dict = {"__name__": "anchor"}
    exec(compile(minimal_script(cell_id), cell_id, "exec"), namespace)   # noqa: S102 (our own generated script)
    return namespace["train"]


def _recipe(cell):
    from harness.cells import resolve
    from harness.train import CellRecipe

    arch, backend, method = resolve(cell)
    return CellRecipe(arch, cell.task, backend, method, cell.inputs, cell.gc_mode)


def adapters_test(cell) -> str:
    """adapters' checkpointing test on the cell's model and adapter (see the module's docstring); its verdict."""
    import tempfile

    import torch
    from adapters import AdapterTrainer
    from transformers import TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    recipe, states = _recipe(cell), []
    for checkpointing in (True, False):
        torch.manual_seed(42)
        model = recipe.attach(recipe.build())
        if checkpointing:
            model.gradient_checkpointing_enable()
        batches = [recipe.batch(model, k) for k in range(16)]
        with tempfile.TemporaryDirectory() as out:
            args = TrainingArguments(output_dir=out, do_train=True, learning_rate=1.0, max_steps=8, use_cpu=True,
                                     per_device_train_batch_size=1, gradient_accumulation_steps=2,
                                     remove_unused_columns=False, report_to="none", save_strategy="no",
                                     logging_strategy="no", disable_tqdm=True)
            trainer = AdapterTrainer(model=model, args=args, train_dataset=batches, data_collator=lambda items: items[0])
            trainer.remove_callback(PrinterCallback)   # its summary line on stdout
            trainer.train()
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    same = all(torch.equal(a, b) for a, b in zip(states[0].values(), states[1].values()))
    return "state dicts equal" if same else "state dicts differ"


def peft_test(cell) -> str:
    """peft's checkpointing test on the cell's model and method (see the module's docstring); its verdict."""
    import torch

    recipe = _recipe(cell)
    torch.manual_seed(0)
    model = recipe.attach(recipe.build())
    model.train(True)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    batch = {k: v for k, v in recipe.batch(model, 0).items() if k != "labels"}

    def grads():
        for _, p in params:
            p.grad = None
        (model(**batch)[0] ** 2).sum().backward()
        return {n: 0.0 if p.grad is None else p.grad.abs().sum().item() for n, p in params}

    normal = grads()
    model.prepare_model_for_gradient_checkpointing(model)
    model.gradient_checkpointing_enable({"use_reentrant": cell.gc_mode == "reentrant"})
    checkpointing = grads()
    threshold = sum((*normal.values(), *checkpointing.values())) / (2 * len(normal)) * 1e-6
    same = all((normal[n] <= threshold or checkpointing[n] > 0) and (checkpointing[n] <= threshold or normal[n] > 0)
               for n in normal)
    return "non-zero sets agree" if same else "non-zero sets differ"


def _fastest(fns, repeat: int) -> list[tuple[float, object]]:
    """(fastest of `repeat` timings, the last result) of each of `fns`, timed in turns: what the machine's other
    load adds to a timing is not the harness's (the noise of a shared 2-core machine is +-10 %)."""
    times, results = [[] for _ in fns], [None] * len(fns)
    for _ in range(repeat):
        for i, f in enumerate(fns):
            t = time.perf_counter()
            results[i] = f()
            times[i].append(time.perf_counter() - t)
    return [(min(ts), r) for ts, r in zip(times, results)]


def _quietly(f):
    """A pure run that raises (a cell whose checkpointed training fails) costs what it took until then; its
    warnings are not printed."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return f()
        except Exception as exc:  # noqa: BLE001
            return exc


def pure_part(cells, repeat: int) -> None:
    import dataclasses

    import torch

    from harness import backends
    from harness.backends.base import GC_MODES
    from harness.cells import find
    from harness.run import Runner

    f32 = torch.float32
    totals = [0.0] * 4
    print(f"{'cell':<55}{'harness':>8}{'pure':>6}{'ratio':>6}   {'its run':>7}{'harness':>8}{'pure':>6}{'ratio':>6}")
    for cell_id in cells:
        cell, train = find(cell_id), pure_runner(cell_id)
        run = [dataclasses.replace(cell, gc_mode=m, order=o)
               for m in GC_MODES for o in backends.get(cell.backend).orders]
        trains = [pure_runner(c.id) for c in run]

        runner = Runner()   # one per process, as in a run: the heap settled once per arch (Runner._settle_heap)

        def harness_one():
            runner.forget()
            return runner.run_cell(cell)

        def harness_run():
            runner.forget()
            return [runner.run_cell(c) for c in run]

        def pure_run():
            _quietly(lambda: trains[0](False, f32))
            return [_quietly(lambda: t(True, f32)) for t in trains]

        (h, _), (p, _), (hr, _), (pr, _) = _fastest(
            [harness_one, lambda: _quietly(lambda: (train(False, f32), train(True, f32))), harness_run, pure_run],
            repeat)
        totals = [a + b for a, b in zip(totals, (h, p, hr, pr))]
        print(f"{cell_id:<55}{h * 1000:>8.0f}{p * 1000:>6.0f}{h / p:>6.2f}   {len(run):>7}{hr / len(run) * 1000:>8.0f}"
              f"{pr / len(run) * 1000:>6.0f}{hr / pr:>6.2f}")
    h, p, hr, pr = totals
    print(f"{'sample':<55}{h * 1000:>8.0f}{p * 1000:>6.0f}{h / p:>6.2f}   {'':>7}{'':>8}{'':>6}{hr / pr:>6.2f}")


def libraries_part(cells, repeat: int) -> None:
    from harness.cells import find
    from harness.run import Runner

    print(f"{'cell':<58}{'harness ms':>11}  {'outcome':<12}{'library test ms':>16}  {'its verdict':<22}{'ratio':>6}")
    totals, runner = {}, Runner()
    for cell_id in cells:
        cell = find(cell_id)
        test = {"adapters": adapters_test, "peft": peft_test}[cell.backend]
        (h, rec), (lib, says) = _fastest([lambda: (runner.forget(), runner.run_cell(cell))[1], lambda: test(cell)],
                                         repeat)
        th, tl = totals.get(cell.backend, (0.0, 0.0))
        totals[cell.backend] = (th + h, tl + lib)
        print(f"{cell_id:<58}{h * 1000:>11.0f}  {rec['outcome']:<12}{lib * 1000:>16.0f}  {says:<22}{lib / h:>6.2f}")
    for backend, (h, lib) in totals.items():
        print(f"{backend + ' pairs':<58}{h * 1000:>11.0f}  {'':<12}{lib * 1000:>16.0f}  {'':<22}{lib / h:>6.2f}")


def run_part() -> None:
    import contextlib
    import io
    import json
    import tempfile

    import importlib

    importlib.import_module("peft")   # imported before the clock starts, as by the other parts

    from harness import cli

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.json")
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            cli.main(["run", "--arch", "bert,llama,t5", "--method", "lora,ia3", "--backend", "peft", "--inputs", "masked",
                      "--recipe", "loop", "-q", "--json", path])
        wall = time.perf_counter() - t
        with open(path) as fh:
            cells = json.load(fh)["cells"]
    in_cells = sum(c["seconds"] for c in cells)
    print(f"a run of {len(cells)} cells (peft LoRA and IA3 on BERT, Llama, T5): {wall:.2f} s wall, {in_cells:.2f} s in "
          f"cells, {1 - in_cells / wall:.0%} outside them (selection, the report; after the imports)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="*", help="for the pure part (default: a sample)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--part", default="pure,libraries,run", help="comma-separated: pure, libraries, run")
    args = ap.parse_args(argv)
    parts = args.part.split(",")
    if bad := sorted(set(parts) - {"pure", "libraries", "run"}):
        ap.error(f"unknown part {bad[0]!r}: pure, libraries, run")
    import torch
    import transformers

    from harness import backends

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()   # the libraries' per-call notices, not results

    def present(ids):
        return [c for c in ids if not backends.get(c.split("-")[0]).missing]

    if "pure" in parts:
        pure_part(present(args.cells or SAMPLE), args.repeat)
    if "libraries" in parts:
        libraries_part(present(LIBRARY_PAIRS), args.repeat)
    if "run" in parts:
        run_part()
    return 0


if __name__ == "__main__":
    sys.exit(main())
