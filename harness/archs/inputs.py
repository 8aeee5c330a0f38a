"""Batches: what every cell's model is fed (the losses are harness/archs/losses.py).

Two input rules, each a pure function of (spec, task, inputs, step, seed): :func:`make_batch`, ArchSpec's (token ids,
pixels or mel features by modality: the registry's archs), and :func:`zoo_batch`, the zoo's (one rule per `feed`,
:data:`FEEDS`).
"""
from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import torch

from .per_arch import NEEDS_BBOX

NUM_LABELS = 3
BATCH = 2
SEQ_LEN = 10   # tokens a row; `--seq-len` sets it for the process (harness/own.py), so long-context paths run
VOCAB = 256   # the tiny models' vocabulary (base.SHRINK's vocab_size); ids are drawn below it

# input rules of zoo_batch: token ids; ids + pixels (dual encoders); ids with image tokens + pixels (VLMs);
# the same with Qwen2-VL patch grids, or with several images (tiles) per sample, or with an image's tiles read by
# cross-attention (Mllama); ids with audio tokens + mel features (audio LMs); such patches and grids alone (a VLM's
# vision tower); SigLIP2's patches with their mask and (h, w) shapes; pixels (or video frames); raw waveform; (frames,
# mel) spectrogram; mel features (channels-first or time-first, as the tower reads them); past/future values of a
# time series
FEEDS = ("text", "text+pixels", "vlm", "vlm_grid", "vlm_tiles", "vlm_cross", "alm", "patch_grid", "naflex", "pixels",
         "waveform", "spectrogram", "mel", "time_series")


# ---------------------------------------------------------------------------------------------
# What a model's forward takes (asked by the zoo's feed rule too)
def _accepts(cls, arg: str) -> bool:
    try:
        return arg in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


def _sub(cfg, key: str):
    """cfg, or the first sub-config (vision, audio, text, encoder, then any) that has `key`."""
    if hasattr(cfg, key):
        return cfg
    subs = [getattr(cfg, s, None) for s in ("vision_config", "audio_config", "text_config", "encoder")]
    subs += [v for v in vars(cfg).values() if hasattr(v, "to_dict") and hasattr(v, "model_type")]
    for c in subs:
        if c is not None and hasattr(c, key):
            return c
    return cfg


def _grid_arg(cls) -> str | None:
    """The name of the (t, h, w) patch-grid argument of a Qwen2-VL-style vision input, if `cls` takes one."""
    return next((a for a in ("grid_thw", "image_grid_thw") if _accepts(cls, a)), None)


# ---------------------------------------------------------------------------------------------
# Inputs and loss of ArchSpec (ArchSpec.make_batch / ArchSpec.loss)
def _mask(kind: str, left: bool, gen: torch.Generator) -> torch.Tensor | None:
    if kind == "unmasked":
        return None
    mask = torch.ones(BATCH, SEQ_LEN, dtype=torch.long)
    if kind == "padded":  # second row padded by 3 (left for decoder-only models, right otherwise)
        if left:
            mask[1, :3] = 0
        else:
            mask[1, -3:] = 0
    return mask


def _ids(gen: torch.Generator, vocab: int, shape=None) -> torch.Tensor:
    # ids 0..4 are kept free of content so that special/pad ids are never drawn
    return torch.randint(5, vocab, shape or (BATCH, SEQ_LEN), generator=gen)


def _vocab(model) -> int:
    cfg = model.config
    for c in (cfg, getattr(cfg, "text_config", None), getattr(cfg, "decoder", None)):
        v = getattr(c, "vocab_size", None) if c is not None else None
        if isinstance(v, int):
            return min(v, VOCAB)
    return VOCAB


def make_batch(spec, task: str, model, inputs: str, step: int, seed: int = 0) -> dict[str, Any]:
    """The synthetic batch for one training step: a pure function of (spec, task, inputs, step, seed)."""
    gen = torch.Generator().manual_seed(seed * 1000 + step)
    cfg = model.config
    batch: dict[str, Any] = {}
    if spec.modality in ("vision", "multimodal") or task == "image_cls":
        vc = getattr(cfg, "vision_config", cfg)
        batch["pixel_values"] = torch.randn(BATCH, vc.num_channels, vc.image_size, vc.image_size, generator=gen)
    if spec.modality == "audio":
        n_frames = 2 * cfg.max_source_positions
        batch["input_features"] = torch.randn(BATCH, cfg.num_mel_bins, n_frames, generator=gen)
    if spec.modality in ("text", "multimodal"):  # multimodal, e.g. CLIP: both towers
        ids = _ids(gen, _vocab(model))
        mask = _mask(inputs, spec.decoder_only, gen)
        if mask is not None:
            pad = getattr(getattr(cfg, "text_config", cfg), "pad_token_id", None)
            ids = ids.masked_fill(mask == 0, pad if isinstance(pad, int) else 0)
            batch["attention_mask"] = mask
        batch["input_ids"] = ids

    add_labels(task, batch, model, gen)
    return batch


def add_labels(task: str, batch: dict[str, Any], model, gen: torch.Generator) -> None:
    """The targets of a task's head (one rule for every registry's inputs)."""
    if task in ("seq_cls", "image_cls", "audio_cls"):
        batch["labels"] = torch.randint(0, NUM_LABELS, (BATCH,), generator=gen)
    elif task == "token_cls":
        labels = torch.randint(0, NUM_LABELS, (BATCH, SEQ_LEN), generator=gen)
        if "attention_mask" in batch:
            labels = labels.masked_fill(batch["attention_mask"] == 0, -100)
        batch["labels"] = labels
    elif task == "causal_lm":
        labels = batch["input_ids"].clone()
        if "attention_mask" in batch:
            labels = labels.masked_fill(batch["attention_mask"] == 0, -100)
        batch["labels"] = labels
    elif task == "seq2seq_lm":
        batch["labels"] = _ids(gen, _vocab(model), (BATCH, SEQ_LEN // 2 + 1))
    elif task == "contrastive":
        batch["return_loss"] = True


# ---------------------------------------------------------------------------------------------
# Inputs of zoo specs (ZooSpec.make_batch)
def _gen(step: int, seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1000 + step)


def _image_hw(c) -> tuple[int, int]:
    size = getattr(c, "image_size", None)
    if isinstance(size, int):
        return size, size
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return int(size[0]), int(size[1])
    if isinstance(size, dict):
        return int(size.get("height", 32)), int(size.get("width", 32))
    return 32, 32


def _naflex(cfg, gen) -> dict[str, torch.Tensor]:
    """SigLIP2's native-resolution input: each image as its patches (batch, patches, channels * patch^2), a
    patch mask and the (height, width) of its patch grid; a 4x4 grid, all patches real."""
    c = getattr(cfg, "vision_config", cfg)
    h = w = 4
    return {"pixel_values": torch.randn(BATCH, h * w, c.num_channels * c.patch_size ** 2, generator=gen),
            "pixel_attention_mask": torch.ones(BATCH, h * w, dtype=torch.long),
            "spatial_shapes": torch.tensor([[h, w]] * BATCH)}


def _pixels(cfg, gen) -> torch.Tensor:
    c = _sub(cfg, "num_channels") if not hasattr(cfg, "num_channels") else cfg
    if hasattr(cfg, "vision_config"):
        c = cfg.vision_config
    ch = getattr(c, "num_channels", 3)
    h, w = _image_hw(c)
    frames = getattr(c, "num_frames", None)
    if isinstance(frames, int):   # video models: (batch, frames, channels, height, width)
        return torch.randn(BATCH, frames, ch, h, w, generator=gen)
    return torch.randn(BATCH, ch, h, w, generator=gen)


def _prompts(pixel_values: torch.Tensor, gen) -> dict[str, torch.Tensor]:
    """SAM's prompts in pixels of the input image: per image a positive and a negative point and a box, so that
    each point embedding (labels 1 and 0, a box's two corners) trains. No mask prompt: with one, the dense
    embedding comes from it instead of the no-mask embedding, which point- and box-prompted training uses."""
    h, w = pixel_values.shape[-2:]
    scale = torch.tensor([float(w), float(h)])
    points = torch.rand(BATCH, 1, 2, 2, generator=gen) * scale
    corners = torch.rand(BATCH, 1, 2, 2, generator=gen).sort(dim=2).values * scale   # x0 <= x1, y0 <= y1
    return {"input_points": points, "input_labels": torch.tensor([[[1, 0]]] * BATCH),
            "input_boxes": corners.flatten(2)}


WAVE_LEN = 6400   # samples: ~19 frames after a 320x conv feature extractor (>= SpecAugment's mask length 10)
MEL_FRAMES = 32


def zoo_batch(spec, task: str, model, inputs: str, step: int, seed: int = 0) -> dict[str, Any]:
    """The synthetic batch of a zoo spec: a pure function of (spec, task, inputs, step, seed)."""
    cfg = model.config
    feed = "text+pixels" if task == "contrastive" else spec.feed
    if feed == "text":
        batch = make_batch(dataclasses.replace(spec, modality="text"), task, model, inputs, step, seed)
        if spec.name in NEEDS_BBOX:   # layout models: one normalised box per token (x0 <= x1, y0 <= y1)
            g = _gen(step, seed + 11)
            xy = torch.rand(BATCH, batch["input_ids"].shape[1], 2, generator=g) / 2
            batch["bbox"] = torch.cat([xy, xy + torch.rand(xy.shape, generator=g) / 2], dim=-1)
        _decoder_ids(spec, task, model, batch, step, seed)
        return batch
    gen = _gen(step, seed)
    batch: dict[str, Any] = {}
    if feed in ("vlm", "vlm_grid", "vlm_tiles", "vlm_cross", "alm"):
        batch = _vlm_batch(spec, task, model, inputs, gen)
        _decoder_ids(spec, task, model, batch, step, seed)
        return batch
    if feed == "time_series":
        past = cfg.context_length + max(cfg.lags_sequence)
        nf = cfg.num_time_features
        batch.update(past_values=torch.randn(BATCH, past, generator=gen),
                     past_time_features=torch.randn(BATCH, past, nf, generator=gen),
                     past_observed_mask=torch.ones(BATCH, past),
                     future_values=torch.randn(BATCH, cfg.prediction_length, generator=gen),
                     future_time_features=torch.randn(BATCH, cfg.prediction_length, nf, generator=gen))
    elif feed == "text+pixels":
        batch.update(_naflex(cfg, gen) if _accepts(type(model), "spatial_shapes") else
                     {"pixel_values": _pixels(cfg, gen)})
        tc = getattr(cfg, "text_config", cfg)
        ids = _ids(gen, min(getattr(tc, "vocab_size", VOCAB), VOCAB))
        eos = getattr(tc, "eos_token_id", None)
        if isinstance(eos, int) and eos < VOCAB:   # text towers pool at the (first) EOS token
            ids[:, -1] = eos
        batch["input_ids"] = ids
        m = _mask(inputs, False, gen)
        if m is not None:
            batch["attention_mask"] = m
    elif feed == "patch_grid":
        cls = type(model)
        pix, extras = _grid_pixels(getattr(cfg, "vision_config", cfg), gen, cls)
        first = list(inspect.signature(cls.forward).parameters)[1]   # hidden_states or pixel_values
        batch.update({first: pix, _grid_arg(cls): extras.pop("image_grid_thw"), **extras})
    elif feed == "naflex":
        batch.update(_naflex(cfg, gen))
    elif feed == "pixels":
        batch["pixel_values"] = _pixels(cfg, gen)
        if _accepts(type(model), "input_points"):   # promptable segmentation (SAM)
            batch.update(_prompts(batch["pixel_values"], gen))
        if task == "feature" and _accepts(type(model), "bool_masked_pos") and \
                any(n.endswith("mask_token") for n, _ in model.named_parameters()):
            # masked-image-modeling input the base model takes: half the patches masked, so its mask token trains
            c = _sub(cfg, "patch_size")
            h, w = batch["pixel_values"].shape[-2:]
            n = (h // c.patch_size) * (w // c.patch_size)
            batch["bool_masked_pos"] = torch.rand(BATCH, n, generator=gen) < 0.5
    elif feed == "waveform":
        batch["input_values"] = torch.randn(BATCH, WAVE_LEN, generator=gen)
    elif feed == "spectrogram":
        batch["input_values"] = torch.randn(BATCH, cfg.max_length, cfg.num_mel_bins, generator=gen)
    elif feed == "mel":
        batch["input_features"], extras = _mel_input(model, cfg, model, gen)
        batch.update(extras)
    else:
        raise ValueError(f"unknown feed {feed!r}")
    add_labels(task, batch, model, gen)
    _decoder_ids(spec, task, model, batch, step, seed)
    return batch


def _mel(cfg, gen, channels_first: bool) -> torch.Tensor:
    """Mel features for `cfg` (or its audio sub-config): channels-first (batch, mel, frames), as many frames as a
    Whisper-style encoder takes (2 x max_source_positions) or a windowed one's window (Qwen3-ASR: 2 x n_window), else
    MEL_FRAMES; or time-first (batch, MEL_FRAMES, feature dim: mel bins x frames stacked per step where a model
    stacks them, Fun-ASR's low frame rate)."""
    if channels_first:
        window, whisper = _sub(cfg, "n_window"), _sub(cfg, "max_source_positions")
        half = getattr(window, "n_window", None) or getattr(whisper, "max_source_positions", MEL_FRAMES // 2)
        return torch.randn(BATCH, _sub(cfg, "num_mel_bins").num_mel_bins, 2 * half, generator=gen)
    for key, times in (("feature_projection_input_dim", ""), ("input_feat_per_channel", "input_channels"),
                       ("num_mel_bins", "num_stacked_frames"), ("feature_size", "")):
        c = _sub(cfg, key)
        if hasattr(c, key):
            return torch.randn(BATCH, MEL_FRAMES, getattr(c, key) * getattr(c, times, 1), generator=gen)
    raise ValueError("mel feed: no feature dimension in the config")


def _channels_first(tower: torch.nn.Module, cfg) -> bool:
    """Whether audio tower `tower` of config `cfg` reads mel features channels-first (batch, mel, frames): a
    Whisper-style tower (max_source_positions), a windowed one (Qwen3-ASR: n_window), one that opens with a Conv1d
    over the mel bins (GLM-ASR)."""
    bins = getattr(_sub(cfg, "num_mel_bins"), "num_mel_bins", None)
    if bins is None:
        return False
    if any(hasattr(_sub(cfg, k), k) for k in ("max_source_positions", "n_window")):
        return True
    return any(isinstance(m, torch.nn.Conv1d) and m.in_channels == bins for m in tower.modules())


_FEATURE_MASKS = ("input_features_mask", "feature_attention_mask")
HOP = 160   # raw audio samples per mel frame (10 ms at 16 kHz, as Whisper's feature extractor)


def _mel_input(model, cfg, tower, gen) -> tuple[torch.Tensor, dict[str, Any]]:
    """Mel features of `cfg` laid out as audio tower `tower` reads them, and the masks `model` takes, all real: of
    the frames; of the raw audio (MOSS)."""
    cf = _channels_first(tower, cfg)
    feats = _mel(cfg, gen, channels_first=cf)
    frames = feats.shape[2 if cf else 1]
    cls = type(model)
    extras = {arg: torch.ones(BATCH, frames, dtype=torch.long) for arg in _FEATURE_MASKS if _accepts(cls, arg)}
    if _accepts(cls, "padding_mask"):
        extras["padding_mask"] = torch.ones(BATCH, frames * HOP, dtype=torch.long)
    return feats, extras


def _part(model, *names):
    """The first of `names` that `model` or its inner `.model` (a task head's base model) has, else None."""
    inner = getattr(model, "model", None)
    for name in names:
        found = getattr(model, name, None) or getattr(inner, name, None)
        if found is not None:
            return found
    return None


def _audio_tower(model) -> torch.nn.Module:
    tower = _part(model, "audio_tower", "audio_encoder", "audio_model")
    if tower is None:
        raise ValueError(f"alm feed: {type(model).__name__} has no audio tower")
    return tower


def _audio_fn(model):
    """What counts an audio LM's audio tokens: its get_audio_features, unless that needs the token ids (whose
    placeholders are what is being counted: MusicFlamingo); else its audio tower's forward, whose output is what
    fills the placeholders (Qwen2-Audio's pooled encoder states)."""
    fn = _part(model, "get_audio_features")
    if fn is not None and "input_ids" not in _required(inspect.signature(fn).parameters):
        return fn
    return _audio_tower(model).forward


_AUDIO_TOKEN_KEYS = ("audio_token_id", "audio_token_index")


def _audio_token_id(cfg) -> int | None:
    return _image_token_id(cfg, _AUDIO_TOKEN_KEYS)


def _image_token_id(cfg, keys=("image_token_id", "image_token_index")) -> int | None:
    for k in keys:
        v = getattr(cfg, k, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _special_ids(cfg) -> set[int]:
    out = set()
    for c in (cfg, getattr(cfg, "text_config", None)):
        if c is None:
            continue
        for k, v in vars(c).items():
            if re.search(r"token_(id|index)$", k) and isinstance(v, int) and not isinstance(v, bool):
                out.add(v)
    return out


def _image_fn(model):
    fn = _part(model, "get_image_features")
    if fn is None:
        raise ValueError(f"vlm feed: {type(model).__name__} has no get_image_features to count image tokens with")
    return fn


def _required(params) -> list[str]:
    """The named arguments of a signature's `params` without a default (not *args / **kwargs)."""
    return [k for k, p in params.items() if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


QFORMER_PROMPT = 6   # tokens of InstructBLIP's instruction to its Q-Former


def _image_extras(model, pixel_values, gen, required: list[str]) -> dict[str, Any]:
    """Extra image arguments a VLM needs where get_image_features `required` them: image_sizes; the instruction
    an InstructBLIP Q-Former reads (the same ids for every sample, as one prompt for a batch would be); the
    images at the resolution of a second, high-resolution tower (DeepSeek-VL hybrid's SAM encoder)."""
    out = {}
    if "image_sizes" in required:
        h, w = pixel_values.shape[-2:]
        out["image_sizes"] = torch.tensor([[h, w]] * pixel_values.shape[0])
    if "qformer_input_ids" in required:
        vocab = model.config.qformer_config.vocab_size
        out["qformer_input_ids"] = (torch.arange(QFORMER_PROMPT) * 7 % (vocab - 1) + 1).repeat(BATCH, 1)
    if "high_res_pixel_values" in required:
        out["high_res_pixel_values"] = _pixels(model.config.high_res_vision_config, gen)
    return out


_TOKENS_PER_IMAGE: dict[tuple, int] = {}


def _on_a_copy(model, fn):
    """(`fn`, the model it runs in): for a quantized model, `fn` (a bound method of the model or of one of its
    modules) bound to a copy of it. Asking the count runs an evaluation forward, which makes bitsandbytes repack a
    4-bit weight for its CPU inference kernel for good (the qlora findings): not in the model under training."""
    if not getattr(model, "is_quantized", False) or not isinstance(getattr(fn, "__self__", None), torch.nn.Module):
        return fn, model
    import copy

    paths = {id(m): n for n, m in model.named_modules()}
    twin = copy.deepcopy(model)
    return getattr(twin.get_submodule(paths[id(fn.__self__)]), fn.__name__), twin


def _image_tokens_per_image(model, pixel_values, extras, images: int, fn=None, arg: str = "pixel_values") -> int:
    """How many image-token placeholders each of `images` images takes: asked of the model's own
    get_image_features (the count is the model's: HunYuan-VL and HY-V4-VL add a token per row of patches); with
    `fn` and `arg`, of another media's (audio: :func:`_audio_fn`, input_features)."""
    fn, counted = _on_a_copy(model, fn or _image_fn(model))
    copied, model = counted is not model, counted
    params = inspect.signature(fn).parameters
    passes_on = any(p.kind is p.VAR_KEYWORD for p in params.values())   # VideoLLaMA3's merge sizes go through **kwargs
    kw = {k: v for k, v in extras.items() if k in params or passes_on}
    for k in _required(params):   # settings the forward passes from the config (4.x Llama 4: the feature strategy)
        if k not in kw and k != arg:
            c = model.config
            kw[k] = getattr(c, k) if hasattr(c, k) else getattr(c.vision_config, k)
    was = model.training
    model.train(copied)   # a quantized model's copy (_on_a_copy): in train mode, where bitsandbytes repacks nothing
    try:                  # (the tiny widths fail to), its RNG restored
        with torch.no_grad(), torch.random.fork_rng(enabled=copied):
            f = fn(**{arg: pixel_values}, **kw)
    finally:
        model.train(was)
    if hasattr(f, "pooler_output") and not isinstance(f, torch.Tensor):
        # transformers 5: the features that fill the placeholders are pooler_output (last_hidden_state is the
        # vision tower's own output); an output without them counts its first field
        f = f.pooler_output if f.pooler_output is not None else f[0]
    elif hasattr(f, "to_tuple"):   # a tower's own output (Qwen2-Audio's encoder): its states
        f = f[0]
    if isinstance(f, (list, tuple)) and isinstance(f[0], (list, tuple)):
        f = f[0]   # (features, extras): 4.x Qwen3-VL's (features of each image, deepstack features)
    parts = f if isinstance(f, (list, tuple)) else [f]
    total = sum(x.reshape(-1, x.shape[-1]).shape[0] for x in parts)
    return total // images


GRID = 4   # vlm_grid feed: one frame of GRID x GRID patches per image
IMAGE_AT = 4   # vlm feeds: text tokens before the image


def _field(c, names: tuple[str, ...], default):
    """The value of the first of `names` that config `c` has (one setting, named differently by different models),
    else `default`."""
    return next((getattr(c, k) for k in names if hasattr(c, k)), default)


def _grid_pixels(vc, gen, cls) -> tuple[torch.Tensor, dict[str, Any]]:
    """Qwen2-VL-style vision input for the vision config `vc` of model class `cls`: flattened patches plus
    image_grid_thw (and each image's spatial merge, 1 unless the config says, if `cls` takes it: VideoLLaMA3);
    (pixels, extras). A patch spans one frame unless the config says."""
    ch = _field(vc, ("in_channels", "in_chans", "num_channels"), 3)
    t = _field(vc, ("temporal_patch_size", "patch_temporal"), 1)
    p, merge = vc.patch_size, _field(vc, ("spatial_merge_size", "merge_size"), 1)
    pix = torch.randn(BATCH * GRID * GRID, ch * t * p * p, generator=gen)
    extras = {"image_grid_thw": torch.tensor([[1, GRID, GRID]] * BATCH)}
    for arg in ("merge_sizes", "image_merge_sizes"):
        if _accepts(cls, arg):
            extras[arg] = torch.tensor([merge] * BATCH)
    return pix, extras


def _tiled_image(vc, gen) -> tuple[torch.Tensor, dict[str, Any]]:
    """Mllama-style input for vision config `vc`: one image per sample as max_num_tiles tiles (batch, 1, tiles, C,
    H, W), its aspect-ratio id and a mask of its real tiles; the first sample is one tile (the rest zero padding
    tiles, as the processor pads), the second as many tiles as the first aspect ratio of 1 x k allows."""
    tiles = vc.max_num_tiles
    ratios = [list(r) for r in vc.supported_aspect_ratios]
    wide = max((r for r in ratios if r[0] == 1), key=lambda r: r[1])
    used = [1, wide[1]]
    ids = torch.tensor([[ratios.index([1, 1]) + 1], [ratios.index(wide) + 1]])   # id 0 means no image
    real = torch.arange(tiles)[None, :] < torch.tensor(used)[:, None]
    h, w = _image_hw(vc)
    pix = torch.randn(BATCH, 1, tiles, getattr(vc, "num_channels", 3), h, w, generator=gen)
    pix = pix * real[:, None, :, None, None, None]
    return pix, {"aspect_ratio_ids": ids, "aspect_ratio_mask": real[:, None].long()}


def _vlm_batch(spec, task, model, inputs, gen) -> dict[str, Any]:
    cfg = model.config
    # the media's input name, placeholder id and what counts its placeholders: an image's unless audio
    arg, tok, counter = "pixel_values", _image_token_id(cfg), _image_fn
    if spec.feed == "vlm_grid":
        pix, extras = _grid_pixels(cfg.vision_config, gen, type(model))
    elif spec.feed == "vlm_cross":
        pix, extras = _tiled_image(cfg.vision_config, gen)
    elif spec.feed == "alm":
        pix, extras = _mel_input(model, cfg.audio_config, _audio_tower(model), gen)
        arg, tok, counter = "input_features", _audio_token_id(cfg), _audio_fn
    elif "spatial_shapes" in (required := _required(inspect.signature(_image_fn(model)).parameters)):
        extras = _naflex(cfg, gen)   # a native-resolution (SigLIP2) tower: patches, their mask and grid (LFM2-VL)
        pix = extras.pop("pixel_values")
    else:
        arg = next(iter(required), arg)   # the images' own name (4.x Video-LLaVA's pixel_values_images)
        pix = _pixels(cfg, gen)
        if spec.feed == "vlm_tiles":   # (batch, tiles, C, H, W): several images, or an image's any-resolution tiles
            pix = torch.stack([pix, _pixels(cfg, gen)], dim=1)
        extras = _image_extras(model, pix, gen, required)
    key = (spec.name, task, tuple(pix.shape), repr({k: getattr(v, "tolist", lambda: v)() for k, v in extras.items()}))
    if spec.feed == "vlm_cross":   # the text reads the image by cross-attention: one image token marks its place
        n = 1
    else:
        if key not in _TOKENS_PER_IMAGE:   # a function of the config and the shapes: asked once per arch
            _TOKENS_PER_IMAGE[key] = _image_tokens_per_image(model, pix, extras, BATCH, fn=counter(model), arg=arg)
        n = _TOKENS_PER_IMAGE[key]
    ids = _ids(gen, _vocab(model))
    for sid in _special_ids(cfg):    # no stray special/image token in the text
        ids = ids.masked_fill(ids == sid, 5)
    image = torch.full((BATCH, n), tok)
    start = getattr(cfg, "vision_start_token_id", None)
    if isinstance(start, int):   # models that locate images by their start marker
        image = torch.cat([torch.full((BATCH, 1), start), image], dim=1)
    ids = torch.cat([ids[:, :IMAGE_AT], image, ids[:, IMAGE_AT:]], dim=1)
    batch: dict[str, Any] = {arg: pix, **extras}
    length = ids.shape[1]
    if inputs != "unmasked":
        mask = torch.ones(BATCH, length, dtype=torch.long)
        if inputs == "padded":   # 3 padding positions before the image (left) or at the end (right)
            if spec.decoder_only:
                mask[1, :3] = 0     # (before the image, which starts at IMAGE_AT)
            else:
                mask[1, -3:] = 0
        pad = getattr(cfg, "pad_token_id", None)
        if isinstance(pad, int) and pad >= _vocab(model):   # a stale top-level id (transformers 5's deprecated
            pad = getattr(getattr(cfg, "text_config", cfg), "pad_token_id", None)   # alias: Idefics3 128002, text 0)
        ids = ids.masked_fill(mask == 0, pad if isinstance(pad, int) else 0)
        batch["attention_mask"] = mask
    batch["input_ids"] = ids
    if spec.feed == "vlm_cross":   # text from the image token on attends to the image's real tiles, padding to none
        seen = (torch.arange(length) >= IMAGE_AT)[None, :, None, None] & extras["aspect_ratio_mask"][:, None].bool()
        if "attention_mask" in batch:
            seen = seen & batch["attention_mask"].bool()[:, :, None, None]
        batch["cross_attention_mask"] = seen.long()
    if _accepts(type(model), "image_embeds_position_mask"):   # Kosmos-2
        batch["image_embeds_position_mask"] = ids == tok
    if _accepts(type(model), "mm_token_type_ids"):   # transformers 5 M-RoPE VLMs: 0 text, 1 image token
        batch["mm_token_type_ids"] = (ids == tok).to(torch.int32)
    if task == "causal_lm":
        labels = ids.masked_fill(ids == tok, -100)
        if "attention_mask" in batch:
            labels = labels.masked_fill(batch["attention_mask"] == 0, -100)
        batch["labels"] = labels
    else:
        add_labels(task, batch, model, gen)
    return batch


def _decoder_ids(spec, task, model, batch, step, seed) -> None:
    if task == "feature" and spec.enc_dec and _accepts(type(model), "decoder_input_ids"):
        # the base model of an encoder-decoder runs its decoder too
        gen = _gen(step, seed + 7)
        batch["decoder_input_ids"] = _ids(gen, _vocab(model), (BATCH, SEQ_LEN // 2 + 1))
