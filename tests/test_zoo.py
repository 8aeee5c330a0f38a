"""Rules of the zoo that the matrix depends on: how tiny configs are shrunk, what a batch is made for, and
the loss of a model without a head. Each was a harness-made "finding" before it was a rule."""
import pytest
import torch
from transformers import AutoConfig

from conftest import zoo
from harness import backends
from harness.archs import archs_for
from harness.archs.base import build_model
from harness.archs.inputs import IMAGE_AT
from harness.archs.losses import all_outputs_loss
from harness.archs.zoo import shrunk_values
from harness.train import transformers_model


def config_of(model_type: str):
    """The default config of a model type, or a skip where the installed transformers has no such type."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        import transformers

        pytest.skip(f"transformers {transformers.__version__} has no model type {model_type}")
    return AutoConfig.for_model(model_type)


def test_latent_attention_keeps_a_key_value_head_per_head_and_others_keep_grouped_query_attention():
    mla = shrunk_values(config_of("deepseek_v2"))    # 32 heads, 32 key/value heads by default
    assert mla["num_key_value_heads"] == mla["num_attention_heads"]
    gqa = shrunk_values(config_of("llama"))
    assert gqa.get("num_key_value_heads", 2) < gqa["num_attention_heads"]


def test_expert_widths_are_16_byte_aligned_and_other_widths_stay_odd():
    """transformers 5 runs fused experts through grouped_mm, which needs 16-byte strides."""
    assert shrunk_values(config_of("mixtral"))["intermediate_size"] % 4 == 0
    assert shrunk_values(config_of("hunyuan_v1_moe"))["intermediate_size"] % 4 == 0   # 1 expert -> 4
    assert shrunk_values(config_of("llama"))["intermediate_size"] % 4 != 0   # odd on purpose


@pytest.mark.skipif(backends.get("peft").missing is not None, reason="peft is not installed")
def test_a_batch_is_made_for_the_transformers_model_not_for_peft_s_wrapper():
    """PeftModel.forward(**kwargs) does not show decoder_input_ids: asked of the wrapper, an encoder-decoder's
    feature batch lacked them and every such plain run failed."""
    peft = backends.get("peft")
    arch = zoo("m2m_100", "peft")
    model = build_model(arch, "feature")
    wrapped = peft.attach(build_model(arch, "feature"), arch, "feature", peft.methods["lora"])
    assert transformers_model(wrapped) is wrapped.get_base_model() and transformers_model(model) is model
    batch = arch.make_batch("feature", transformers_model(wrapped), "masked", 0)
    assert "decoder_input_ids" in batch
    assert batch.keys() == arch.make_batch("feature", model, "masked", 0).keys()


def test_the_feature_loss_takes_every_finite_float_output_whether_or_not_it_requires_grad():
    w = torch.ones(2, requires_grad=True)
    out = {"hidden": w * 2, "pooled": torch.full((2,), 3.0), "mask": torch.full((2,), float("-inf")),
           "ids": torch.ones(2, dtype=torch.long)}
    loss = all_outputs_loss(out)
    from harness.archs.losses import projected

    # the k-th float output with its own projection; the -inf mask (a constant) left out, the ids not a float
    assert loss.item() == pytest.approx((projected(w * 2, 0) + projected(out["pooled"], 1)).item())
    assert loss.requires_grad
    assert not torch.isfinite(all_outputs_loss({**out, "hidden": w * float("inf")}))   # a trained output counts
    assert all_outputs_loss({"ids": torch.ones(2, dtype=torch.long)}) is None


def test_rope_overrides_take_the_installed_form_and_mrope_sections_fit_the_head():
    """transformers 5 keeps rope_theta inside rope_parameters and reads rope_scaling as its alias: an override of
    rope_scaling is merged there (replacing it left rope_theta None); 4.x configs keep the override as written."""
    from types import SimpleNamespace

    from harness.archs.zoo import _mrope_sections, rope_form

    over = {"text_config.rope_scaling": {"type": "default", "rope_type": "default", "mrope_section": [2, 1, 1]}}
    v5 = SimpleNamespace(text_config=SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 5e6}))
    assert rope_form(v5, over) == {"text_config.rope_parameters": {"rope_type": "default", "rope_theta": 5e6,
                                                                   "mrope_section": [2, 1, 1]}}
    v4 = SimpleNamespace(text_config=SimpleNamespace(rope_theta=5e6, rope_scaling=None))
    assert rope_form(v4, over) == over
    assert _mrope_sections(8) == [2, 1, 1] and _mrope_sections(8, 0.5) == [1, 1, 0] and sum(_mrope_sections(16)) == 8


def test_image_placeholders_are_counted_from_the_features_that_fill_them():
    """transformers 5's get_image_features returns the vision tower's output with the projected features as
    pooler_output; counting the tower's last_hidden_state (one CLS token more per image on LLaVA, the unmerged
    patches on Gemma 3) made 14 VLMs' batches mismatch their features, so they were not covered on 5.x."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    from harness.archs.inputs import _image_tokens_per_image

    class VLM(torch.nn.Module):
        def __init__(self, out):
            super().__init__()
            self.out = out

        def get_image_features(self, pixel_values):
            return self.out(pixel_values.shape[0])

    pixels = torch.zeros(2, 3, 8, 8)
    tower, merged = torch.zeros(2, 17, 4), [torch.zeros(4, 4), torch.zeros(4, 4)]   # 17 = 16 patches + CLS
    five = VLM(lambda b: BaseModelOutputWithPooling(last_hidden_state=tower, pooler_output=merged))
    assert _image_tokens_per_image(five, pixels, {}, 2) == 4
    no_pooled = VLM(lambda b: BaseModelOutputWithPooling(last_hidden_state=tower))
    assert _image_tokens_per_image(no_pooled, pixels, {}, 2) == 17
    four = VLM(lambda b: torch.zeros(b, 16, 4))   # transformers 4: the features themselves
    assert _image_tokens_per_image(four, pixels, {}, 2) == 16
    # patch-grid VLMs: flattened patches of both images in one tensor, so the count is per image asked for; the
    # model's own count, with HunYuan-VL's extra token per row of merged patches (the formula grid / merge^2
    # gave 4, the model 6: "Image features and image tokens do not match") ...
    grid = torch.zeros(32, 48)
    rows = VLM(lambda b: BaseModelOutputWithPooling(last_hidden_state=grid, pooler_output=[torch.zeros(6, 4)] * 2))
    assert _image_tokens_per_image(rows, grid, {}, 2) == 6
    # ... and 4.x Qwen3-VL's (features of each image, deepstack features of the inner layers)
    deepstack = VLM(lambda b: ((torch.zeros(4, 4), torch.zeros(4, 4)), [torch.zeros(8, 4)] * 3))
    assert _image_tokens_per_image(deepstack, grid, {}, 2) == 4


def test_per_arch_overrides_for_some_releases_apply_only_there():
    """PEGASUS-X's encoder layerdrop is off only on transformers 5, whose encoder crashes when it drops a layer."""
    import transformers
    from packaging.version import Version

    from harness.archs.per_arch import per_arch

    five = Version(transformers.__version__).major >= 5
    over = per_arch("pegasus_x")["overrides"]
    assert over["block_size"] == 8 and ("encoder_layerdrop" in over) == five
    assert "when" not in per_arch("pegasus_x")


def test_a_vlm_s_vision_tower_gets_flattened_patches_and_their_grid_and_trains_its_inner_layer_features():
    """Qwen2-VL-style vision towers (transformers 5 registers 20 as model types) take flattened patches plus a
    (t, h, w) grid, not images: they were not covered. Their deepstack mergers train only from the list of
    inner-layer features the tower returns (a list, which the feature loss counts for these towers only)."""
    from harness.archs.inputs import _grid_pixels
    from harness.archs.losses import nested_outputs
    from harness.archs.zoo import feed_of

    class Tower:
        def forward(self, hidden_states, grid_thw, **kwargs): ...

    class Vlm:
        def forward(self, input_ids, pixel_values=None, image_grid_thw=None): ...

    assert feed_of(Tower, "feature") == ("patch_grid", "vision")
    assert feed_of(Vlm, "causal_lm")[0] == "text"     # a VLM of such towers stays a VLM (vlm_grid with its config)
    from types import SimpleNamespace

    pix, extras = _grid_pixels(SimpleNamespace(patch_size=4, in_channels=3, merge_size=2), torch.Generator(), Tower)
    assert pix.shape == (2 * 16, 3 * 4 * 4) and list(extras) == ["image_grid_thw"]
    assert extras["image_grid_thw"].tolist() == [[1, 4, 4]] * 2
    pix, _ = _grid_pixels(SimpleNamespace(patch_size=4, temporal_patch_size=2), torch.Generator(), Tower)
    assert pix.shape[1] == 3 * 2 * 4 * 4   # a patch spans frames only where the config says (VideoLLaMA3: none)

    class MergingVlm:   # VideoLLaMA3 takes each image's spatial merge; its configs do not say one: 1
        def forward(self, input_ids, pixel_values=None, image_grid_thw=None, image_merge_sizes=None): ...

    _, extras = _grid_pixels(SimpleNamespace(patch_size=4), torch.Generator(), MergingVlm)
    assert extras["image_merge_sizes"].tolist() == [1, 1]
    w = torch.ones(2, requires_grad=True)
    out = {"last_hidden_state": w * 2, "deepstack_features": [w * 3]}
    from harness.archs.losses import projected

    first, inner = projected(w * 2, 0), projected(w * 3, 1)
    assert all_outputs_loss(out).item() == first.item()
    assert all_outputs_loss(out, nested=True).item() == pytest.approx((first + inner).item())
    assert nested_outputs(SimpleNamespace(feed="patch_grid")) and not nested_outputs(SimpleNamespace(feed="text"))
    towers = [a for a in archs_for("full").values() if getattr(a, "feed", None) == "patch_grid"]
    if towers:   # transformers 5: a tower builds and trains, and its deepstack mergers get gradients
        spec = next((a for a in towers if a.name == "qwen3_vl_vision"), towers[0])
        model = build_model(spec, "feature")
        batch = spec.make_batch("feature", model, "unmasked", 0)
        spec.loss("feature", model(**batch)).backward()
        dead = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
        assert not [n for n in dead if "deepstack" in n], dead


@pytest.mark.parametrize("arch", ["idefics3", "llava_next"])
def test_vlms_taking_several_images_per_sample_get_them_and_their_placeholders(arch):
    """Idefics2/3 and their kin take pixel_values as (batch, images, C, H, W), LLaVA-NeXT as an image's
    any-resolution tiles: a 4-D batch left them uncovered ('not enough values to unpack (expected 5, got 4)',
    'split_with_sizes expects split_sizes to sum exactly to 2'). Two images (tiles) per sample, one placeholder
    per feature row they give."""
    spec = zoo(arch)
    assert spec.feed == "vlm_tiles"
    task = spec.tasks[0]
    model = build_model(spec, task)
    # padded too: on transformers 5 Idefics3's top-level pad id (128002) is a stale alias outside the vocabulary;
    # the batch takes the text config's (0)
    assert "padded" in spec.inputs
    batch = spec.make_batch(task, model, "padded", 0)
    assert batch["pixel_values"].ndim == 5 and batch["pixel_values"].shape[:2] == (2, 2)
    spec.loss(task, model(**batch)).backward()   # the model's own check: placeholders == feature rows
    assert model.get_input_embeddings().weight.grad is not None


def test_a_vlm_s_image_text_to_text_head_stands_for_causal_lm_over_its_language_model_alone():
    """Llama 4, Mllama and Emu3 (and Qwen3.5 on transformers 5) name a causal-LM class built from the text config
    alone: built from the VLM's config it raised ('Llama4Config' has no attribute 'vocab_size'), and Qwen3.5 was
    covered only by its classification heads. The image-text-to-text class is the causal LM of a VLM."""
    from harness.archs.zoo import heads_of

    config_of("llama4")   # added in transformers 4.51
    assert heads_of("llama4")["causal_lm"] == "Llama4ForConditionalGeneration"
    assert heads_of("llava")["causal_lm"] == "LlavaForConditionalGeneration"   # no causal-LM mapping: as before
    assert heads_of("llama")["causal_lm"] == "LlamaForCausalLM"


def test_mllama_reads_a_tiled_image_through_more_than_one_cross_attention_layer():
    """Mllama (Llama 3.2 Vision) has no image placeholders to fill: its text attends to the image's tiles in
    cross-attention layers (default [3, 8, ...]: none of a 2-layer model; it did not build). The vlm_cross feed: one
    image token, tiles with an aspect-ratio id and a mask of real tiles (one sample one tile and a padding tile),
    and a cross-attention mask from the image token on; two cross-attention layers, because only a second one
    exposes the reentrant failure recorded for it (one trains)."""
    spec = zoo("mllama")
    assert spec.feed == "vlm_cross"
    model = build_model(spec, "causal_lm")
    assert len(model.config.text_config.cross_attention_layers) == 2
    batch = spec.make_batch("causal_lm", model, "padded", 0)
    tiles = model.config.vision_config.max_num_tiles
    assert batch["pixel_values"].shape[:3] == (2, 1, tiles)
    assert batch["aspect_ratio_mask"][:, 0].sum(1).tolist() == [1, 2]
    assert not batch["pixel_values"][0, 0, 1].any()              # the first sample's padding tile is zero
    seen = batch["cross_attention_mask"]
    assert seen.shape == (*batch["input_ids"].shape, 1, tiles)
    assert not seen[:, :IMAGE_AT].any() and not seen[1, :3].any()   # nothing before the image, nor padding
    spec.loss("causal_lm", model(**batch)).backward()
    tower = [p for n, p in model.named_parameters() if "vision_model" in n]
    assert tower and all(p.grad is not None for p in tower)


# (transformers 5 only: GLM-ASR's tower opens with a Conv1d over the mel bins but has no max_source_positions;
# Qwen3-ASR's reads whole windows of 2 x n_window frames; Fun-ASR's takes stacked frames time-first; MOSS's
# get_audio_features requires a raw-audio mask; MusicFlamingo's requires the very ids whose placeholders are counted;
# NeMo SpeechLM's tower holds a diarization model)
ALMS_5 = ["glmasr", "qwen3_asr", "fun_asr_nano", "moss_transcribe_diarize", "musicflamingo", "nemo_speechlm"]


@pytest.mark.parametrize("arch", ["qwen2_audio", "voxtral", *ALMS_5])
def test_audio_language_models_get_audio_features_and_their_placeholders(arch):
    """Audio LMs (a language model fed audio-encoder states at audio-token placeholders) were trained on text
    alone, as feature models: the audio tower never ran and the verdict named most of their tensors 'never get a
    non-zero gradient, not vouched for'. The alm feed: mel features of the audio config, their frame mask where the
    model takes one, as many placeholders as the model's own audio features have rows; a causal-LM head."""
    if arch in ALMS_5 and arch not in archs_for("full"):
        pytest.skip(f"{arch} is a model type of transformers 5 only")
    spec = zoo(arch)
    assert spec.feed == "alm" and spec.tasks[0] == "causal_lm"
    model = build_model(spec, "causal_lm")
    batch = spec.make_batch("causal_lm", model, "padded", 0)
    tok = next(getattr(model.config, k) for k in ("audio_token_id", "audio_token_index") if hasattr(model.config, k))
    per_sample = (batch["input_ids"] == tok).sum(1).tolist()
    assert per_sample[0] == per_sample[1] > 0
    torch.manual_seed(0)   # the tower's LayerDrop (0.1, as shrunk) draws from the global RNG, as the runner seeds it
    spec.loss("causal_lm", model(**batch)).backward()   # the model's own check: placeholders == audio rows
    # every trainable tensor of the audio tower (its sinusoidal positions are fixed, requires_grad False) but NeMo
    # SpeechLM's diarization model, which reaches the states only through thresholded speaker activity (no gradient)
    tower = [(n, p) for n, p in model.named_parameters() if "audio_tower" in n and p.requires_grad]
    assert tower and all(p.grad is not None for n, p in tower if "diarization_model" not in n)


def test_mel_features_are_laid_out_as_the_audio_tower_reads_them():
    """Channels-first (batch, mel, frames) for a Whisper-style tower (as many frames as its positions), a windowed
    one (one window: Qwen3-ASR raised on anything but a multiple of 2 x n_window) and one that opens with a Conv1d
    over the mel bins (GLM-ASR: read time-first it raised "expected input[2, 32, 16] to have 16 channels");
    time-first otherwise, mel bins x the frames a model stacks per step (Fun-ASR: 7)."""
    from types import SimpleNamespace as NS

    from harness.archs.inputs import MEL_FRAMES, _channels_first, _mel

    gen = torch.Generator().manual_seed(0)
    conv, linear = torch.nn.Conv1d(16, 32, 3), torch.nn.Linear(16, 32)
    assert _channels_first(conv, NS(num_mel_bins=16))
    assert not _channels_first(linear, NS(num_mel_bins=16))
    assert not _channels_first(torch.nn.Conv1d(8, 32, 3), NS(num_mel_bins=16))
    assert _channels_first(linear, NS(num_mel_bins=16, n_window=50))
    assert _channels_first(linear, NS(num_mel_bins=16, max_source_positions=16))
    assert _mel(NS(num_mel_bins=16, n_window=50), gen, True).shape == (2, 16, 100)
    assert _mel(NS(num_mel_bins=16, max_source_positions=16), gen, True).shape == (2, 16, 32)
    assert _mel(NS(num_mel_bins=16), gen, True).shape == (2, 16, MEL_FRAMES)
    assert _mel(NS(num_mel_bins=16, num_stacked_frames=7), gen, False).shape == (2, MEL_FRAMES, 112)
    assert _mel(NS(num_mel_bins=16), gen, False).shape == (2, MEL_FRAMES, 16)


def test_a_vlm_with_a_native_resolution_tower_gets_patches_their_mask_and_grid():
    """LFM2-VL's SigLIP2 tower reads each image as patches with a mask and a (height, width) grid, which its
    get_image_features requires: the vlm feed gave it images (missing 2 required positional arguments). Its
    placeholders: one per 2 x 2 block of the 4 x 4 grid."""
    spec = zoo("lfm2_vl")
    model = build_model(spec, "causal_lm")
    batch = spec.make_batch("causal_lm", model, "padded", 0)
    assert batch["pixel_values"].shape[:2] == batch["pixel_attention_mask"].shape == (2, 16)
    assert batch["spatial_shapes"].tolist() == [[4, 4]] * 2
    factor = model.config.downsample_factor
    assert (batch["input_ids"] == model.config.image_token_id).sum(1).tolist() == [16 // factor ** 2] * 2
    spec.loss("causal_lm", model(**batch)).backward()
    tower = [p for n, p in model.named_parameters() if "vision_tower" in n]
    assert tower and all(p.grad is not None for p in tower)


def _one_step(arch: str, task: str | None = None, inputs: str | None = None):
    """`arch`'s tiny model (full fine-tuning) for `task` (its primary task by default) and its batch (its first
    input variant by default), after one forward and backward seeded as the runner seeds a step."""
    spec = zoo(arch)
    task, inputs = task or spec.tasks[0], inputs or spec.inputs[0]
    model = build_model(spec, task)
    batch = spec.make_batch(task, model, inputs, 0)
    torch.manual_seed(0)
    spec.loss(task, model(**batch)).backward()
    return model, batch


def test_an_override_read_back_from_the_table_gets_the_int_keys_the_config_has():
    """The survey's tables are JSON data, whose keys are strings: Aria's patch-to-query table ({16: 4} in PER_ARCH)
    came back as {"16": 4}, which its projector cannot look 16 up in (every plain run of 219 failed). A dict
    override replacing an int-keyed dict gets int keys; other dicts (Gemma 4's per-layer config) stay as written."""
    from types import SimpleNamespace as NS

    from harness.archs.base import _set_nested

    cfg = NS(patch_to_query={1225: 128}, per_layer=None, sub=NS(table={0: "a"}))
    _set_nested(cfg, "patch_to_query", {"16": 4})
    _set_nested(cfg, "per_layer", {"1": {"head_dim": 16}})
    _set_nested(cfg, "sub.table", {"3": "b"})
    assert cfg.patch_to_query == {16: 4} and cfg.per_layer == {"1": {"head_dim": 16}} and cfg.sub.table == {3: "b"}


def test_a_vlm_with_a_second_high_resolution_tower_gets_the_images_at_its_resolution():
    """DeepSeek-VL hybrid reads each image twice, through SigLIP and through a high-resolution SAM encoder whose
    get_image_features argument (high_res_pixel_values) the vlm feed did not give; SAM's states come from its
    global-attention layer, which must lie within the shrunk depth. Both towers train, every tensor of them (the
    SigLIP tower without the pooling head the model never reads, as converted)."""
    model, batch = _one_step("deepseek_vl_hybrid", "causal_lm", "padded")
    hc = model.config.high_res_vision_config
    assert batch["high_res_pixel_values"].shape == (2, hc.num_channels, hc.image_size, hc.image_size)
    for tower in ("model.high_res_vision_model.", "model.vision_model."):   # SAM; SigLIP
        params = [p for n, p in model.named_parameters() if n.startswith(tower)]
        assert params and all(p.grad is not None for p in params), tower


def test_a_vlm_gets_its_images_under_the_name_its_image_function_reads():
    """4.x Video-LLaVA reads images as pixel_values_images (beside pixel_values_videos): the vlm feed passed
    pixel_values, which get_image_features did not take. Its image tower's layers train (not its video tower, not
    fed, nor the post-layernorm after the layer it reads)."""
    import inspect

    from harness.archs.inputs import _image_fn

    model, batch = _one_step("video_llava", inputs="padded")
    first = next(k for k, p in inspect.signature(_image_fn(model)).parameters.items() if p.default is p.empty)
    want = first if first.startswith("pixel_values") else "pixel_values"
    assert want in batch and "pixel_values_videos" not in batch
    tower = [p for n, p in model.named_parameters() if "image_tower" in n and ".encoder." in n]
    assert tower and all(p.grad is not None for p in tower)


def test_a_vision_tower_that_keeps_the_default_main_input_name_is_fed_pixels():
    """Idefics3's and SmolVLM's vision towers take pixel_values but inherit main_input_name "input_ids", so the rule
    fed them token ids ("missing 1 required positional argument: 'pixel_values'"); a text model stays text."""
    import transformers

    from harness.archs.zoo import feed_of

    config_of("smolvlm")   # added in transformers 4.50
    assert feed_of(transformers.Idefics3VisionTransformer, "feature") == ("pixels", "vision")
    assert feed_of(transformers.SmolVLMVisionTransformer, "feature") == ("pixels", "vision")
    assert feed_of(transformers.LlamaModel, "feature")[0] == "text"
    model, batch = _one_step("idefics3_vision", "feature", "unmasked")
    assert set(batch) == {"pixel_values"}
    assert all(p.grad is not None for p in model.parameters())


def test_a_dropout_field_typed_int_keeps_its_default_and_the_others_are_on():
    """transformers 5 types MPT's attn_pdrop (and TimeSformer's drop_path_rate) as int, and its strict configs refuse
    0.1 ("expected int, got float"): MPT did not build. That field keeps its default; MPT's other dropouts are on."""
    import transformers

    from harness.archs.zoo import _typed_int

    cfg = config_of("mpt")
    out = shrunk_values(cfg)
    typed = _typed_int(cfg.attn_config, "attn_pdrop")
    assert typed == (int(transformers.__version__.split(".")[0]) >= 5)
    assert ("attn_config.attn_pdrop" in out) != typed and out["resid_pdrop"] == out["emb_pdrop"] == 0.1
    _one_step("mpt", "causal_lm", "padded")   # builds and trains


def test_a_promptable_segmenter_gets_points_and_a_box_and_its_tower_trains():
    """SAM's mask decoder reads prompts: with pixels alone its point embeddings never trained. A positive and a
    negative point and a box per image, inside the image; every point embedding and the tower get gradients."""
    model, batch = _one_step("sam", "feature", "unmasked")
    h, w = batch["pixel_values"].shape[-2:]
    assert batch["input_points"].shape == (2, 1, 2, 2) and batch["input_labels"].tolist() == [[[1, 0]]] * 2
    boxes = batch["input_boxes"]
    assert boxes.shape == (2, 1, 4) and (boxes[..., :2] <= boxes[..., 2:]).all()
    assert (batch["input_points"] >= 0).all() and (batch["input_points"][..., 0] <= w).all() \
        and (batch["input_points"][..., 1] <= h).all()
    grads = dict((n, p.grad) for n, p in model.named_parameters())
    assert all(grads[f"prompt_encoder.point_embed.{i}.weight"].any() for i in range(4))
    tower = [g for n, g in grads.items() if n.startswith("vision_encoder.")]
    assert tower and all(g is not None for g in tower)


@pytest.mark.parametrize("arch", ["blip-2", "sam"])
def test_a_placeholder_initializer_range_is_raised_so_that_the_tower_s_gradients_are_measurable(arch):
    """SAM's and BLIP-2's vision configs default to initializer_range 1e-10, a placeholder that checkpoints
    overwrite: a random tower's weights were ~1e-10, its gradients blown up to ~1e7 behind a LayerNorm (BLIP-2)
    or, for its relative-position tables, zero (SAM). The rule sets transformers' usual 0.02; ranges in use stay."""
    assert shrunk_values(config_of(arch))["vision_config.initializer_range"] == 0.02
    assert "initializer_range" not in shrunk_values(config_of("llama"))
    model, _ = _one_step(arch)
    tower = [p.grad.abs().max() for n, p in model.named_parameters() if "vision" in n and p.grad is not None]
    assert tower and 1e-6 < max(tower) < 1e3


@pytest.mark.parametrize("arch", ["blip-2", "instructblip", "kosmos-2"])
def test_query_transformer_vlms_get_image_placeholders_for_their_queries(arch):
    """BLIP-2, InstructBLIP and Kosmos-2 read images through learned queries (a Q-Former, a resampler): their
    image-token id is unset by default and their main input is pixel_values, so the rule fed pixels alone
    (KeyError: 'input_ids'). A placeholder per query output; InstructBLIP's Q-Former also reads an instruction;
    Kosmos-2 places the queries by a position mask."""
    spec = zoo(arch)
    assert spec.feed == "vlm"
    task = "causal_lm" if "causal_lm" in spec.tasks else spec.tasks[0]
    model = build_model(spec, task)
    batch = spec.make_batch(task, model, "padded", 0)
    cfg = model.config
    queries = getattr(cfg, "num_query_tokens", None) or cfg.latent_query_num
    tok = next(getattr(cfg, k) for k in ("image_token_index", "image_token_id") if getattr(cfg, k, None) is not None)
    assert (batch["input_ids"] == tok).sum(1).tolist() == [queries] * 2
    assert ("qformer_input_ids" in batch) == (arch == "instructblip")
    if arch == "kosmos-2":
        assert torch.equal(batch["image_embeds_position_mask"], batch["input_ids"] == tok)
    spec.loss(task, model(**batch)).backward()
    vision = [p for n, p in model.named_parameters() if "vision" in n]
    assert vision and any(p.grad is not None and p.grad.any() for p in vision)


def test_a_shape_constrained_method_keeps_peft_s_default_when_that_default_is_one_regex():
    """peft's default targets for Gemma 4 are one regex of full module names, not a list: the shape-constrained
    fallback (BOFT, OFT, ... keep only layers whose dims divide by their block) joined it character by character
    and matched nothing (48 Gemma 4 baselines failed to attach). Where the default is a regex, it is matched."""
    from harness.backends._peft_targets import MARK, resolve

    nn = torch.nn
    lm = nn.ModuleDict({"q_proj": nn.Linear(32, 32), "v_proj": nn.Linear(32, 32), "k_proj": nn.Linear(32, 32),
                        "up": nn.Linear(32, 37)})
    model = nn.Module()
    model.model = nn.ModuleDict({"language_model": nn.ModuleDict({"layer": lm}),
                                 "vision": nn.ModuleDict({"q_proj": nn.Linear(32, 32)})})
    regex = r".*language_model\..*\.(q_proj|v_proj)"
    assert resolve(f"{MARK}linear/8:re:{regex}", model) == ["model.language_model.layer.q_proj",
                                                              "model.language_model.layer.v_proj"]
    assert resolve(f"{MARK}linear/8:q_proj,up", model) == ["model.language_model.layer.q_proj", "model.vision.q_proj"]


def test_a_model_built_in_another_dtype_keeps_what_its_construction_makes_float32():
    """As `from_pretrained(dtype=...)` leaves them: a router weight or buffer the model declares float32 (Inkling 2's
    router, whose forward feeds it `hidden_states.float()`) stays float32; cast, the float64 rerun of its mismatches
    (and a bfloat16 run) crashed with 'expected m1 and m2 to have the same dtype'."""
    from transformers import PretrainedConfig, PreTrainedModel

    from harness.archs.base import to_dtype

    class Cfg(PretrainedConfig):
        model_type = "harness_router_test"

    class Router(PreTrainedModel):
        config_class = Cfg

        def __init__(self, config):
            super().__init__(config)
            self.proj = torch.nn.Linear(4, 4)
            self.gate = torch.nn.Parameter(torch.zeros(2, 4, dtype=torch.float32))
            self.register_buffer("bias", torch.zeros(2, dtype=torch.float32))
            self.register_buffer("scale", torch.ones(2))
            self.post_init()

        def forward(self, x):
            return torch.nn.functional.linear(self.proj(x).float(), self.gate) + self.bias

    for dtype in (torch.float64, torch.bfloat16):
        model = to_dtype(Router(Cfg()), "cpu", dtype)
        assert model.proj.weight.dtype == model.scale.dtype == dtype
        assert model.gate.dtype == model.bias.dtype == torch.float32
        model(torch.ones(1, 4, dtype=dtype))


def test_a_float64_run_keeps_its_loss_in_float64():
    """transformers' causal-LM loss "upcasts" with `logits.float()`, and the harness's feature loss did too: the
    float64 rerun then rounded its outputs to float32 in the loss and carried float32 rounding into every
    gradient, and one output rounding the other way "confirmed" Blenderbot + WaveFT's rounding as a mismatch. In
    float64 both losses stay float64 (and the float32 run is left as it is)."""
    from harness.archs.losses import loss_of

    spec = zoo("gpt2")
    for dtype in (torch.float32, torch.float64):
        torch.manual_seed(0)
        model = build_model(spec, "causal_lm", dtype).eval()   # no dropout: the two forwards agree
        batch = spec.make_batch("causal_lm", model, "masked", 0, 0)
        out = model(**batch)
        assert out.logits.dtype == out.loss.dtype == dtype
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        shifted = batch["labels"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
        exact = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), shifted.flatten(), ignore_index=-100)
        assert out.loss.item() == pytest.approx(exact.item(), rel=1e-12 if dtype == torch.float64 else 1e-6)
        assert loss_of("feature", (logits,)).dtype == dtype


def test_the_feature_loss_sees_a_normalised_output():
    """A base model's output is normalised as a rule (a final LayerNorm / RMSNorm); the feature loss was the mean
    square of its outputs, a constant of a normalised tensor (Gemma 4: 1.0 at every step, largest gradient 5e-7,
    below float32's atol: the KV-sharing bug under reentrant checkpointing went unseen). A fixed random projection
    sees every element: O(1) gradients, the same functional in every run of a cell and in float64."""
    from harness.archs.losses import all_outputs_loss, loss_of, projected

    x = torch.randn(2, 10, 32, dtype=torch.float64, requires_grad=True)
    for loss in (loss_of("feature", (torch.nn.functional.layer_norm(x, (32,)),)),
                 all_outputs_loss({"last_hidden_state": torch.nn.functional.rms_norm(x, (32,), eps=1e-6)})):
        (g,) = torch.autograd.grad(loss, x)
        assert float(g.abs().max()) > 1e-3
    h = torch.randn(2, 4)
    assert torch.equal(projected(h), projected(h.clone())) and projected(h).dtype == torch.float32
    assert projected(h.double()).item() == pytest.approx(projected(h).item(), rel=1e-6)
    assert projected(h, 1).item() != projected(h, 0).item()


def test_mixture_of_experts_layers_run_their_experts_eagerly_in_float64():
    """transformers 5 runs experts through torch's grouped_mm, which has no float64 kernel: the float64 rerun of
    every MoE mismatch failed ('Expected mat_a to be Float32, BFloat16 or Float16 matrix, got Double')."""
    spec = zoo("olmoe")
    torch.manual_seed(0)
    plain = build_model(spec, "causal_lm")
    if getattr(plain.config, "_experts_implementation", None) is None:
        pytest.skip("this transformers has no experts implementations (added in 5)")
    assert plain.config._experts_implementation == "grouped_mm"
    model = build_model(spec, "causal_lm", torch.float64)
    assert model.config._experts_implementation == "eager"
    model(**spec.make_batch("causal_lm", model, "masked", 0, 0))
