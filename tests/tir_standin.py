"""A scripted stand-in policy for the tool-integrated rollout tests: a real one-layer Qwen2 model whose
weights make it a bigram table, and a small tokenizer with whole-phrase tokens.

``scripted_policy(codes)`` returns (model, tokenizer, prompts): prompt k's last token is followed by
one token holding "```python\\n<codes[k]>\\n", then a closing fence token "```" (the code block is
then closed: the rollout stops and runs it), and after the appended output block (which ends with a
newline) the model writes "The answer is 42." and its EOS. With ``repeat=True`` the newline is
followed by prompt 0's code block again, so a completion calls the tool until ``max_tool_calls``.

How the weights do it: attention and MLP outputs are zero, so the last hidden state is the current
token's embedding (one-hot), and the LM head maps token a to a large logit on ``next[a]``; greedy
and seeded sampling both pick it (probability 1 - 1e-20). The model runs through the real HF
engine, the real decode loop with its KV cache, and the hf_process worker (which rebuilds it from
its config and state dict).

The tokenizer encodes by greedy longest match over its pieces: every printable ASCII character and
newline, plus the phrases. One piece, "```\\n", spans the boundary between a sampled closing fence
and the appended output block: re-encoding a joined transcript would merge the two, so a test can
tell that the rollout never re-encodes.
"""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

PAD, EOS, UNK = 0, 1, 2
FENCE, ANSWER = "```", "The answer is 42."
CROSS = "```\n"  # the piece that re-encoding would form across the sampled fence and the appended block
DETOUR = "```text\nno code here\n```\n"  # a fenced block that is not python, as one token (save_hf_policy)


class PieceTokenizer:
    """Enough of a Hugging Face tokenizer for the engines: ``__call__``, ``decode``, pad/eos ids."""

    def __init__(self, phrases: list[str]):
        chars = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
        self.pieces = ["<pad>", "<eos>", "\ufffd", *chars, *[p for p in phrases if p not in chars]]
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.longest = max(len(p) for p in self.pieces)
        self.pad_token_id, self.eos_token_id = PAD, EOS
        self.pad_token, self.eos_token = "<pad>", "<eos>"

    def encode(self, text: str) -> list[int]:
        out, i = [], 0
        while i < len(text):
            for n in range(min(self.longest, len(text) - i), 0, -1):
                if text[i:i + n] in self.ids and self.ids[text[i:i + n]] > UNK:
                    out.append(self.ids[text[i:i + n]])
                    i += n
                    break
            else:  # a character outside the pieces (a real tokenizer falls back to bytes)
                out.append(UNK)
                i += 1
        return out

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": self.encode(text)}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(self.pieces[i] for i in ids if not (skip_special_tokens and i in (PAD, EOS)))

    def __len__(self) -> int:
        return len(self.pieces)


def scripted_policy(codes: list[str], repeat: bool = False, newline_after_fence: bool = False,
                    layers: int = 1, hidden: int = 0, intermediate: int = 8):
    """(model, tokenizer, prompts) as the module notes say. ``newline_after_fence``: a rollout without
    tools goes on after the fence with a newline, then the answer (the same text less the output
    block); ``layers`` / ``hidden`` / ``intermediate``: a model that costs as much per token as a real
    one of that size (the extra layers compute and add nothing)."""
    prompts = [f"Q{k}:" for k in range(len(codes))]
    blocks = [f"```python\n{code}\n" for code in codes]
    tok = PieceTokenizer([*prompts, *blocks, FENCE, CROSS, ANSWER, "```output\n"])
    nxt = {tok.ids[p]: tok.ids[b] for p, b in zip(prompts, blocks)}
    nxt.update({tok.ids[b]: tok.ids[FENCE] for b in blocks})
    for last in ("\n", CROSS):  # the appended output block ends with either
        nxt[tok.ids[last]] = tok.ids[blocks[0]] if repeat else tok.ids[ANSWER]
    nxt[tok.ids[ANSWER]] = EOS
    if newline_after_fence:
        nxt[tok.ids[FENCE]] = tok.ids["\n"]
    model = _bigram(len(tok), nxt, layers, hidden, intermediate)
    return model, tok, prompts


def save_hf_policy(path, code: str, prompt_end: str = ":", *, repeat: bool = False, detour_end: str | None = None,
                   plain_end: str | None = None, hidden: int = 0) -> None:
    """The scripted policy as a model directory the trainer loads (``AutoTokenizer`` /
    ``AutoModelForCausalLM``): a real ``tokenizers`` tokenizer (one token per character, the phrases
    as added tokens, matched longest first) and the bigram weights. Whatever the prompt, if it ends
    with ``prompt_end`` the policy writes a ```python block with ``code``, then after its output
    block "The answer is 42." and EOS. ``repeat``: after an output block it writes the code block
    again (then, once no longer given an output, EOS after the fence). ``detour_end``: a prompt
    ending there first gets ``DETOUR`` (one token holding a fenced block that is not python), then
    the code block; ``plain_end``: a prompt ending there gets the answer and EOS, no code.
    ``hidden``: the model's width (0: the smallest that fits)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # byte-level symbols (as GPT-2 / Qwen2 spell bytes) with no merges: one token per character. A qwen2
    # model directory is loaded as Qwen2Tokenizer, which keeps this vocabulary and the added tokens.
    chars = [chr(c) for c in range(33, 127)] + ["\u0120", "\u010a", "\u0109"]  # + space, newline, tab
    vocab = {p: i for i, p in enumerate(["<pad>", "<eos>", "<unk>", *chars])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    block = f"```python\n{code}\n"
    phrases = (block, FENCE, CROSS, ANSWER, "```output\n") + ((DETOUR,) if detour_end else ())
    core.add_tokens([AddedToken(p, normalized=False) for p in phrases])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    ids = tok.convert_tokens_to_ids
    after_output = ids(block) if repeat else ids(ANSWER)
    nxt = {ids(prompt_end): ids(block), ids(block): ids(FENCE), ids("\u010a"): after_output, ids(CROSS): after_output,
           ids(ANSWER): EOS}
    if detour_end:
        nxt.update({ids(detour_end): ids(DETOUR), ids(DETOUR): ids(block)})
    if plain_end:
        nxt[ids(plain_end)] = ids(ANSWER)
    model = _bigram(len(tok), nxt, hidden=hidden)
    model.save_pretrained(path)
    tok.save_pretrained(path)


def _bigram(vocab: int, nxt: dict[int, int], layers: int = 1, hidden: int = 0, intermediate: int = 8):
    """A Qwen2 model that, at each position, puts all its mass on ``nxt[current token]`` (EOS for any
    other token)."""
    hidden = max(hidden, -(-vocab // 8) * 8)  # room for a one-hot embedding, and an even head size
    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         tie_word_embeddings=False, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=EOS)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(vocab, hidden))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        head = torch.zeros(vocab, hidden)
        for a in range(vocab):
            head[nxt.get(a, EOS), a] = 5.0  # the normed one-hot is ~sqrt(hidden) ~ 11: logit ~ 55
        model.lm_head.weight.copy_(head)
    model.generation_config.eos_token_id = EOS
    model.generation_config.pad_token_id = PAD
    return model
