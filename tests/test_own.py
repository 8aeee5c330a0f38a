"""Check my setup (harness/own.py): a user's config.json, LoraConfig / adapters config, sequence length and checkpoint
become the cells' arch and method; the shrink keeps the config's switches; bad files exit 2 in one line."""
from __future__ import annotations

import json

import pytest

from harness import backends, cli, own
from harness.archs import archs_for
from harness.archs.base import build_model

# config.json files as the hub has them for these models (their published sizes)
MISTRAL = {"architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
           "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
           "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
           "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000}
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
           "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
           "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
           "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
           "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
           "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": 32000}
T5 = {"architectures": ["T5ForConditionalGeneration"], "d_ff": 2048, "d_kv": 64, "d_model": 512,
      "decoder_start_token_id": 0, "dropout_rate": 0.1, "eos_token_id": 1, "initializer_factor": 1.0,
      "is_encoder_decoder": True, "layer_norm_epsilon": 1e-06, "model_type": "t5", "n_positions": 512, "num_heads": 8,
      "num_layers": 6, "output_past": True, "pad_token_id": 0, "relative_attention_num_buckets": 16,
      "vocab_size": 32128}
VIT = {"architectures": ["ViTForImageClassification"], "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu",
       "hidden_dropout_prob": 0.0, "hidden_size": 768, "image_size": 224, "initializer_range": 0.02,
       "intermediate_size": 3072, "layer_norm_eps": 1e-12, "model_type": "vit", "num_attention_heads": 12,
       "num_channels": 3, "num_hidden_layers": 12, "patch_size": 16, "qkv_bias": False}
LORA = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": ["q_proj", "v_proj"],
        "task_type": "CAUSAL_LM", "bias": "none"}
ADAPTERS_LORA = {"architecture": "lora", "r": 16, "alpha": 16, "selfattn_lora": True, "intermediate_lora": False,
                 "output_lora": False, "attn_matrices": ["q", "v"], "composition_mode": "add", "init_weights": "lora",
                 "use_gating": False, "dropout": 0.1}

needs_peft = pytest.mark.skipif(bool(backends.get("peft").missing), reason="peft not installed")
needs_adapters = pytest.mark.skipif(bool(backends.get("adapters").missing), reason="adapters not installed")


@pytest.fixture(autouse=True)
def restored():
    yield
    own.restore()


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def spec_of(model_type: str):
    return next(archs_for(b)[model_type] for b in backends.BACKEND_NAMES
                if not backends.get(b).missing and model_type in archs_for(b))


@pytest.mark.parametrize("config, kept", [
    (MIXTRAL, {"num_experts_per_tok": 2, "router_aux_loss_coef": 0.02, "rope_theta": 1e6, "tie_word_embeddings": False}),
    (T5, {"relative_attention_num_buckets": 16, "is_encoder_decoder": True}),
    (VIT, {"qkv_bias": False, "image_size": 32}),
], ids=["mixtral", "t5", "vit"])
def test_a_config_is_shrunk_keeping_its_switches(tmp_path, config, kept):
    if not any(config["model_type"] in archs_for(b) for b in backends.BACKEND_NAMES if not backends.get(b).missing):
        pytest.skip(f"{config['model_type']} is not covered with these versions (4.48.3 has no zoo)")
    implied = own.install(model_config=write(tmp_path, "config.json", config))
    spec = spec_of(config["model_type"])
    assert implied == {"arch": config["model_type"]} and spec.notes.startswith("from ")
    model = build_model(spec, spec.primary_task)
    cfg = model.config
    for key, value in kept.items():
        assert getattr(cfg, key) == value, key
    assert sum(p.numel() for p in model.parameters()) < 1_000_000        # shrunk from billions / millions
    drops = [v for k, v in cfg.to_dict().items() if "drop" in k and isinstance(v, float)]
    assert drops and all(v == 0.1 for v in drops)                          # dropout on, whatever the user had


def test_a_sliding_window_binds_at_the_sequence_length(tmp_path):
    path = write(tmp_path, "config.json", {**MISTRAL, "sliding_window": 16})
    own.install(model_config=path)                  # 10 tokens: a 16-token window would never bind
    spec = spec_of("mistral")
    assert build_model(spec, "causal_lm").config.sliding_window == 5 and "sliding_window 16 -> 5" in spec.notes
    own.restore()
    own.install(model_config=path, seq_len=40)      # --seq-len above the window keeps it
    spec = spec_of("mistral")
    cfg = build_model(spec, "causal_lm").config
    assert cfg.sliding_window == 16 and cfg.max_position_embeddings >= 80 and "cut" not in spec.notes
    from harness.archs import inputs

    assert inputs.SEQ_LEN == 40
    own.restore()
    assert inputs.SEQ_LEN == 10


@needs_peft
def test_run_checks_a_users_model_and_lora_config(tmp_path, capsys):
    """The Done case: a Mistral config.json with a sliding window and a LoraConfig (r=16, q/v) run as cells of
    the plain loop; the JSON records the files; the cells train the user's adapter."""
    model, lora, out = write(tmp_path, "config.json", MISTRAL), write(tmp_path, "lora.json", LORA), tmp_path / "r.json"
    rc = cli.main(["run", "--model-config", model, "--method-config", lora, "--backend", "peft", "--inputs", "masked",
                   "--recipe", "loop", "--seq-len", "24", "--gc-mode", "non_reentrant,reentrant", "--parallel", "single",
                   "--json", str(out)])
    assert rc == 0, capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["options"]["model_config"] == model and data["options"]["method_config"] == lora
    assert data["options"]["seq_len"] == 24
    assert {(c["arch"], c["method"]) for c in data["cells"]} == {("mistral", "lora")}
    assert len(data["cells"]) == 12   # 2 gc modes x 3 orders (prepare_kbit: peft's QLoRA entry point) x 2 tasks
    method = backends.get("peft").methods["lora"]
    config = method.make_config(spec_of("mistral"), "seq_cls")
    assert config.r == 16 and set(config.target_modules) == {"q_proj", "v_proj"} and config.task_type == "SEQ_CLS"


@needs_adapters
def test_an_adapters_config_replaces_its_method(tmp_path):
    implied = own.install(method_config=write(tmp_path, "adapter_config.json", ADAPTERS_LORA))
    assert implied == {"method": "lora", "backend": "adapters"}
    config = backends.get("adapters").methods["lora"].make_config(archs_for("adapters")["bert"], "seq_cls")
    assert config.r == 16 and config.alpha == 16 and config.attn_matrices == ["q", "v"]


@needs_peft
def test_weights_train_the_users_checkpoint_unshrunk(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(1)
    cfg = AutoConfig.for_model("llama", hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=300)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "ckpt")
    own.install(weights=str(tmp_path / "ckpt"))
    spec = spec_of("llama")
    model = build_model(spec, "causal_lm")
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    assert model.config.hidden_size == 48 and model.config.attention_dropout == 0.1   # unshrunk, dropout on
    assert torch.equal(model.model.embed_tokens.weight, saved.model.embed_tokens.weight)


@needs_peft
def test_a_saved_adapters_config_is_trained_as_from_pretrained_is_trainable_loads_it(tmp_path, capsys):
    """An adapter_config.json as save_pretrained writes it (inference_mode: true) is the adapter the user trains:
    loaded with inference mode off, said in the run's header; its cells train (no vacuous baseline)."""
    model, lora = write(tmp_path, "config.json", MISTRAL), write(tmp_path, "lora.json", {**LORA, "inference_mode": True})
    rc = cli.main(["run", "--model-config", model, "--method-config", lora, "--backend", "peft", "--inputs", "masked",
                   "--recipe", "loop,trainer", "--gc-mode", "non_reentrant", "--task", "causal_lm", "--parallel",
                   "single", "-q"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "inference_mode: true (as save_pretrained writes it); loaded for training with inference_mode off" in out
    # the prepare_kbit cell: prepare_model_for_kbit_training on the unquantized model enables no checkpointing
    assert "vacuous baseline" not in out and "4 cells: equivalent: 3, not_checkpointed: 1; 4 as expected" in out, out


@needs_peft
def test_a_method_config_whose_targets_the_users_model_lacks_is_refused_before_the_run(tmp_path, capsys):
    model = write(tmp_path, "config.json", MISTRAL)
    lora = write(tmp_path, "lora.json", {**LORA, "target_modules": ["query", "value"]})   # BERT's names
    assert cli.main(["run", "--model-config", model, "--method-config", lora, "--parallel", "single"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --method-config") and "refuses to attach it to the model of 'mistral'" in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("flag, content, needle", [
    ("--model-config", "not json", "cannot read a JSON config: JSONDecodeError"),
    ("--model-config", [1, 2], "a config is a JSON object, not list"),
    ("--model-config", {"hidden_size": 8}, "has no model_type: not a transformers config.json"),
    ("--model-config", {"model_type": "no_such_model"}, "model_type 'no_such_model' is not covered here"),
    ("--model-config", {**MISTRAL, "hidden_act": "no_such_activation"}, "cannot build a model from"),
    ("--method-config", {"alpha": "x", "nonsense": 1}, "not a peft config (no peft_type)"),
    ("--method-config", {"peft_type": "NOPE"}, "peft refuses it"),
    ("--method-config", {**LORA, "r": 0, "target_modules": ["query"]}, "peft refuses to attach it to bert (any "
                                                                        "model): ValueError: `r` should be a positive"),
    ("--seq-len", None, "--seq-len must be >= 4 tokens"),
])
def test_bad_own_input_exits_2_in_one_line(tmp_path, capsys, flag, content, needle):
    if flag == "--seq-len":
        value = "2"
    else:
        path = tmp_path / "c.json"
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        value = str(path)
    if flag == "--method-config" and backends.get("peft").missing:
        pytest.skip("peft not installed")
    few = ["--gc-mode", "non_reentrant", "--inputs", "masked", "--order", "gc_first", "--recipe", "loop"]   # if not
    rc = cli.main(["run", flag, value, *few])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert needle in err
