"""Check my setup: a user's model config (`--model-config`), method config (`--method-config`), sequence length
(`--seq-len`) and checkpoint (`--weights`), made entries of this process's registries.

A model config becomes the arch of its `model_type`: shrunk by the zoo's rule (widths, depth, heads, vocabulary,
positions; dropout on at 0.1), keeping every other value it sets (sliding windows, rope scaling, MoE routing, layer
types, tied embeddings, ...), so the cells keep their ids and the known causes of that model type apply. A window
longer than the sequence would never bind: it is cut to half the sequence, and `--seq-len` makes the sequence
long enough to keep it. `--weights` loads the user's checkpoint itself, unshrunk. A method config (peft's
adapter_config.json / a LoraConfig's JSON, or an adapters config JSON) replaces the method of the same config class
that agrees with it on the most fields; the cells then train the user's config (its target modules, rank, ...),
with the task type of the cell's head. Anything that cannot be read, matched or built is a SelectionError (one
line, exit 2) before a cell runs.
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from typing import Any

from .cells import SelectionError

WINDOW_KEYS = ("sliding_window", "attention_chunk_size", "window_size", "local_attention")
MAX_PARAMETERS = 20_000_000   # a shrunk model above this kept a width the rule does not know


def read_json(path: str, name: str, flag: str) -> dict:
    """The JSON at `path`, or at `path`/`name` for a folder; SelectionError naming `flag` otherwise."""
    file = os.path.join(path, name) if os.path.isdir(path) else path
    try:
        with open(file) as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise SelectionError(f"{flag} {path!r}: cannot read a JSON config: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise SelectionError(f"{flag} {path!r}: a config is a JSON object, not {type(data).__name__}")
    return data


def _base_spec(model_type: str, flag: str, path: str):
    from . import backends
    from .archs import archs_for, zoo_survey

    for b in backends.BACKEND_NAMES:
        if not backends.get(b).missing and model_type in archs_for(b):
            return archs_for(b)[model_type]
    why = zoo_survey()[1].get(model_type, "not a model type of the installed transformers")
    raise SelectionError(f"{flag} {path!r}: model_type {model_type!r} is not covered here ({why})")


def arch_from_config(path: str, seq_len: int | None = None, weights: str | None = None, flag: str = "--model-config"):
    """The ArchSpec of a user's config.json (the shrunk config as its overrides), or with `weights` of their
    checkpoint folder (loaded as it is)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from .archs.base import replace
    from .archs.inputs import SEQ_LEN
    from .archs.zoo import _IGNORE, _flat, arch_overrides, shrunk_values

    d = read_json(path, "config.json", flag)
    mtype = d.get("model_type")
    if not isinstance(mtype, str):
        raise SelectionError(f"{flag} {path!r} has no model_type: not a transformers config.json")
    base = _base_spec(mtype, flag, path)
    try:
        cfg = CONFIG_MAPPING[mtype].from_dict(dict(d))
    except Exception as exc:  # noqa: BLE001  (the config class's own refusal)
        raise SelectionError(f"{flag} {path!r}: {mtype} config refuses it: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0]}") from None
    seq = seq_len or SEQ_LEN
    user = {k: v for k, v in _flat(d).items() if not _IGNORE.search(k) and k.split(".")[-1] != "model_type"}
    if weights:
        dropout = {k: v for k, v in shrunk_values(cfg).items() if "drop" in k.split(".")[-1]}
        return replace(base, overrides={**user, **dropout}, build=_loader(weights, base, dropout),
                       notes=f"the checkpoint in {weights}, unshrunk")
    # the model type's own fixes under the user's values, the rule's sizes of the user's config over both
    overrides = {**dict(base.overrides), **user, **shrunk_values(cfg), **arch_overrides(mtype, cfg)}
    cut = []
    for k, v in list(overrides.items()):
        last = k.split(".")[-1]
        if last in WINDOW_KEYS and isinstance(v, int) and not isinstance(v, bool) and v >= seq:
            overrides[k] = max(2, seq // 2)
            cut.append(f"{k} {v} -> {overrides[k]}")
    note = f"from {path}" + (f"; windows cut to bind at {seq} tokens ({', '.join(cut)}; --seq-len above the "
                             f"window keeps it)" if cut else "")
    return replace(base, overrides=overrides, notes=note)


def _loader(weights: str, spec, dropout: dict):
    """An ArchSpec.build: the head class of the task, from_pretrained on the user's folder, dropout on."""
    def build(task: str):
        from transformers import AutoConfig

        from .archs.base import _set_nested, head_class

        cfg = AutoConfig.from_pretrained(weights)
        for k, v in dropout.items():
            _set_nested(cfg, k, v)
        return head_class(spec, task).from_pretrained(weights, config=cfg)
    return build


def method_from_config(path: str, flag: str = "--method-config"):
    """(the backends it is for, a MethodSpec replacing the built-in method it is a variant of)."""
    from . import backends
    from .archs import archs_for

    d = read_json(path, "adapter_config.json", flag)
    if "peft_type" in d:
        names = [b for b in ("peft", "transformers_peft") if not backends.get(b).missing]
        if not names:
            raise SelectionError(f"{flag} {path!r} is a peft config; peft is not installed here")
        from peft import PeftConfig

        fields = {k: v for k, v in d.items() if not k.startswith("_")}
        if fields.get("inference_mode"):   # as save_pretrained writes it: the user trains it, as from_pretrained's
            fields["inference_mode"] = False   # is_trainable=True loads it
            NOTICES.append(f"{flag} {path!r} says inference_mode: true (as save_pretrained writes it); loaded for "
                           f"training with inference_mode off, as PeftModel.from_pretrained(..., is_trainable=True) "
                           f"does")
        try:
            user = PeftConfig.from_peft_type(**fields)
        except Exception as exc:  # noqa: BLE001
            raise SelectionError(f"{flag} {path!r}: peft refuses it: {type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0]}") from None
    else:
        names = ["adapters"]
        if backends.get("adapters").missing:
            raise SelectionError(f"{flag} {path!r} is not a peft config (no peft_type); adapters is not installed "
                                 f"here for an adapters config")
        import adapters

        try:
            user = adapters.AdapterConfig.load(d)
        except Exception as exc:  # noqa: BLE001
            raise SelectionError(f"{flag} {path!r}: not a peft config (no peft_type), nor an adapters config: "
                                 f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    be = backends.get(names[0])
    ref = archs_for(names[0]).get(be.reference_arch) or next(iter(archs_for(names[0]).values()))
    best, score = None, -1
    for m in be.methods.values():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # a variant's config warns about the reference arch's task
                mine = m.make_config(ref, ref.primary_task)
        except Exception:  # noqa: BLE001  (a method that needs another arch)
            continue
        if type(mine) is not type(user):
            continue
        same = sum(getattr(mine, f, None) == getattr(user, f, None) for f in _fields(user))
        if same > score:
            best, score = m, same
    if best is None:
        raise SelectionError(f"{flag} {path!r}: no method of {names[0]} makes a {type(user).__name__}")
    return names, dataclasses.replace(best, make_config=_made(user, best), notes=f"from {path}")


def _fields(config) -> list[str]:
    if dataclasses.is_dataclass(config):
        return [f.name for f in dataclasses.fields(config)]
    return list(vars(config))


def _made(user, builtin):
    """A make_config: the user's config with the task type of the cell's head (peft's wrapper class follows it)."""
    import copy

    def make(arch, task) -> Any:
        out = copy.deepcopy(user)
        if hasattr(out, "task_type"):
            out.task_type = builtin.make_config(arch, task).task_type
        return out
    return make


def install(model_config: str | None = None, method_config: str | None = None, seq_len: int | None = None,
            weights: str | None = None) -> dict:
    """Make the user's configs this process's entries (every backend's registry); the filters they imply
    ({"arch": ..., "method": ..., "backend": ...}) for a caller that has none of its own."""
    from . import backends
    from .archs import archs_for
    from .archs import inputs

    implied: dict[str, str] = {}
    given = dict(model_config=model_config, method_config=method_config, seq_len=seq_len, weights=weights)
    _INSTALLED.update({k: v for k, v in given.items() if v is not None})
    if seq_len is not None:
        if seq_len < 4:
            raise SelectionError(f"--seq-len must be >= 4 tokens, not {seq_len}")
        _set(vars(inputs), "SEQ_LEN", seq_len)
    if weights and not model_config:
        model_config = weights
    if model_config:
        spec = arch_from_config(model_config, seq_len, weights, "--weights" if weights else "--model-config")
        _check_builds(spec, model_config)
        for b in backends.BACKEND_NAMES:
            if not backends.get(b).missing and spec.name in archs_for(b):
                _set(archs_for(b), spec.name, spec)
        implied["arch"] = spec.name
    if method_config:
        names, method = method_from_config(method_config)
        for b in names:
            _set(backends.get(b).methods, method.name, method)
        implied.update(method=method.name, backend=",".join(names))
        _check_attaches(names[0], method, implied.get("arch"), method_config)
    return implied


def _check_attaches(backend: str, method, arch_name: str | None, path: str) -> None:
    """The library attaches the user's method to the user's model (or, with no model given, to the backend's
    reference arch, where only a refusal that is not about the target modules' names speaks for every arch);
    SelectionError (one line) where it refuses, before any cell runs."""
    from . import backends
    from .archs import archs_for
    from .archs.base import build_model

    be = backends.get(backend)
    archs = archs_for(backend)
    arch = archs.get(arch_name) if arch_name else archs.get(be.reference_arch) or next(iter(archs.values()))
    if arch is None or method.applies(arch, arch.primary_task) is not None:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            be.attach(be.setup(build_model(arch, arch.primary_task)), arch, arch.primary_task, method)
    except Exception as exc:  # noqa: BLE001
        said = str(exc).splitlines()[0] if str(exc) else ""
        if arch_name or "target module" not in said.lower():
            where = f"the model of {arch_name!r}" if arch_name else f"{arch.name} (any model)"
            raise SelectionError(f"--method-config {path!r}: {backend} refuses to attach it to {where}: "
                                 f"{type(exc).__name__}: {said}") from None


NOTICES: list[str] = []   # what loading the user's files changed, said in the run's header


_SAVED: list[tuple[dict, str, Any]] = []
_INSTALLED: dict = {}   # the arguments installed, for the processes this one starts (a launch's ranks)


def installed() -> dict:
    """What install() was given in this process (none: {}), for another process to install the same."""
    return dict(_INSTALLED)


def reinstall(given: dict) -> None:
    """Make this process's entries those install(**given) makes (a rank of a launch: its runner's)."""
    if given == _INSTALLED:
        return
    restore()
    if given:
        install(**given)


def _set(registry: dict, key: str, value) -> None:
    _SAVED.append((registry, key, registry[key]))
    registry[key] = value


def restore() -> None:
    """Undo install() (the process's registries and sequence length as they were)."""
    while _SAVED:
        registry, key, old = _SAVED.pop()
        registry[key] = old
    _INSTALLED.clear()
    NOTICES.clear()


def _check_builds(spec, path: str) -> None:
    from .archs.base import build_model

    try:
        model = build_model(spec, spec.primary_task)
    except Exception as exc:  # noqa: BLE001
        raise SelectionError(f"cannot build a model from {path!r}: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    n = sum(p.numel() for p in model.parameters())
    if spec.build is None and n > MAX_PARAMETERS:
        raise SelectionError(f"{path!r} does not shrink: {n:,} parameters after the rule (a width it does not "
                             f"know); `--weights` runs a checkpoint unshrunk")
