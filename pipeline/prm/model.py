"""Process reward models: the Qwen2.5-Math-PRM architecture, loading any supported PRM, and a
tiny randomly initialised one for tests.

Qwen2.5-Math-PRM-7B / -72B (Zhang et al. 2025, "The Lessons of Developing Process Reward Models
in Mathematical Reasoning") are a Qwen2 backbone (`model.*`) with a two-layer head
`score = Linear(h, h) -> ReLU -> Linear(h, 2)` applied at every position; the published usage
joins the steps with the special token `<extra_0>` (one after every step) and takes
softmax(logits)[..., 1] at each separator as P(step good). Their hub code needs
`trust_remote_code` and breaks on newer transformers; `Qwen2ForProcessRewardModel` below is the
same architecture with the same parameter names written against transformers' own Qwen2Model,
so the published weights load with `from_pretrained` and no remote code runs.

`load_prm` picks the class from the checkpoint's `architectures`: Qwen2ForProcessRewardModel,
or any `*ForTokenClassification` with two labels (AutoModelForTokenClassification). Anything
else is refused with one line: its head would be initialised at random without a word.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import Qwen2Config, Qwen2Model, Qwen2PreTrainedModel

SEPARATOR = "<extra_0>"  # the Qwen2.5-Math-PRM step separator (one special token)


class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):
    """Qwen2 backbone + the Qwen PRM head; `forward` returns logits [B, T, 2]."""

    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]  # some PRM checkpoints keep the LM head

    def __init__(self, config: Qwen2Config):
        super().__init__(config)
        self.model = Qwen2Model(config)
        h = config.hidden_size
        self.score = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 2))
        self.post_init()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return self.score(hidden)  # [B, T, 2]


class PRMError(ValueError):
    """A model that is not a supported process reward model; one line naming it."""


def _architecture(name_or_path: str) -> str:
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(name_or_path)
    archs = config.get("architectures") or []
    return archs[0] if archs else ""


def load_prm(name_or_path: str, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """(model in eval mode on `device`, tokenizer, separator token id) for a supported PRM."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    arch = _architecture(name_or_path)
    if arch.endswith("ProcessRewardModel"):
        model = Qwen2ForProcessRewardModel.from_pretrained(name_or_path, dtype=dtype)
    elif arch.endswith("ForTokenClassification"):
        model = AutoModelForTokenClassification.from_pretrained(name_or_path, dtype=dtype)
        if model.config.num_labels != 2:
            raise PRMError(f"reward.prm: {name_or_path} classifies tokens into {model.config.num_labels} labels; "
                           "a PRM needs 2 (bad, good)")
    else:
        raise PRMError(f"reward.prm: {name_or_path} is a {arch or 'model without architectures'}; supported: "
                       "Qwen2ForProcessRewardModel (the Qwen2.5-Math-PRM family) or a 2-label *ForTokenClassification")
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    return model.to(device).eval().requires_grad_(False), tokenizer, separator_id(tokenizer, name_or_path)


def separator_id(tokenizer, name: str = "the PRM") -> int:
    """The id of `<extra_0>`, which must be a single token of the PRM's vocabulary."""
    ids = tokenizer.encode(SEPARATOR, add_special_tokens=False)
    if len(ids) != 1 or tokenizer.convert_ids_to_tokens(ids[0]) != SEPARATOR:
        raise PRMError(f"reward.prm: the tokenizer of {name} has no {SEPARATOR} token (it splits it into {ids}); "
                       "the Qwen2.5-Math-PRM step-separator protocol needs it")
    return ids[0]


def build_tiny_prm(out_dir: str, tokenizer_dir: str, *, hidden: int = 64, layers: int = 2, heads: int = 2,
                   kv_heads: int = 1, intermediate: int = 128, max_positions: int = 4096, seed: int = 0) -> Path:
    """A randomly initialised Qwen2ForProcessRewardModel with `tokenizer_dir`'s tokenizer plus
    `<extra_0>`, saved with save_pretrained: PRM-shaped, for plumbing tests only (its scores
    mean nothing; a wide initialisation spreads them over (0, 1) so tests can tell steps apart)."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.add_tokens([AddedToken(SEPARATOR, special=True, normalized=False)], special_tokens=True)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=intermediate,
                         max_position_embeddings=max_positions, rope_theta=10000.0, initializer_range=0.2,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    model = Qwen2ForProcessRewardModel(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


__all__ = ["PRMError", "Qwen2ForProcessRewardModel", "SEPARATOR", "build_tiny_prm", "load_prm", "separator_id"]
