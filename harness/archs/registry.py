"""The architecture registry: data. One entry per arch; the generic shrink rule does the rest."""
from __future__ import annotations

from .base import ArchSpec

ARCHS: dict[str, ArchSpec] = {a.name: a for a in [
    ArchSpec("bert", tasks=("seq_cls", "token_cls")),
    ArchSpec("llama", tasks=("causal_lm", "seq_cls"), decoder_only=True),
    ArchSpec("t5", tasks=("seq2seq_lm",)),
    ArchSpec("vit", tasks=("image_cls",), modality="vision", inputs=("unmasked",)),
]}
