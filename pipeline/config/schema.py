"""The typed run config: one dataclass per stage; the text under each field is its documentation.

A YAML file in ``configs/`` sets sections by name (``data:``, ``model:``, ``train:`` ...) and
the command line overrides single keys (``train.lr=1e-5``). Defaults are written here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pipeline.config import checks

MIX = "+"  # joins the datasets of a mixture in train.task, sft.task, eval.dataset: gsm8k+math
# Choice lists the config refers to, written once here; code reads them with typing.get_args, and the
# code that implements each name is tested to agree (tests/test_config_fields.py).
Dataset = Literal["gsm8k", "math", "math500", "gsm-synth"]  # prepared by `mathrl data` (data/prepare.py)
Split = Literal["train", "test", "test_longer"]  # splits of a prepared dataset (test_longer: gsm-synth's)
SynthOp = Literal["+", "-", "*", "/"]  # gsm-synth's operations (data/synth.py)
Supervision = Literal["outcome", "process"]  # train.advantage; `mathrl experiment` runs both
Stage = Literal["build-tiny", "sft", "train", "eval"]  # what `mathrl run` may run, in this order
Tracker = Literal["tensorboard", "wandb", "trackio", "mlflow"]  # train.report_to (grpo/trackers.py)
TemplateName = Literal["gsm8k", "gsm8k_boxed", "math", "qwen_math", "qwen_math_tir", "verl_gsm8k", "plain"]  # prompts.TEMPLATES
SandboxBackend = Literal["auto", "docker", "bwrap", "process"]  # sandbox.BACKENDS, or auto
Tool = Literal["python"]  # rollout.tools: pipeline/rollout/multi_turn.py
StepScorer = Literal["rules", "prm", "both"]  # `mathrl eval-prm --scorer`
WarmStart = Literal["corrupted", "clean"]  # `mathrl seed-grid --warm-starts`

# The objective's choices, each listed once; the registries that implement them (pipeline/grpo/losses.py,
# advantages.py, rollout/tis.py) are keyed by these names and read them with typing.get_args.
LossType = Literal["grpo", "bnpo", "dapo", "dr_grpo"]
Surrogate = Literal["clip", "sapo", "cispo", "vespo", "dppo"]
DppoDivergence = Literal["tv", "kl"]
KLEstimator = Literal["k1", "k2", "k3"]
ImportanceLevel = Literal["token", "sequence"]
AdvScale = Literal["group", "batch", "none"]
AdvNorm = Literal["group", "per_reward", "rank"]
ISCorrection = Literal["tis", "mis"]


@dataclass
class DataConfig:
    """Data preparation (`mathrl data`): raw GSM8K / MATH / MATH-500 -> uniform JSONL."""

    source: Literal["local", "hub"] = "local"
    """Where raw data comes from: `local` reads the files shipped in `raw_dir`; `hub` calls
    `datasets.load_dataset` with the Hugging Face ids (needs network access to the Hub)."""
    raw_dir: str = "data/raw"
    """Folder of the shipped raw files (gzipped JSONL, see data/README.md)."""
    prepared_dir: str = "data/prepared"
    """Output folder: `<dataset>/<split>.jsonl` in the prepared schema (pipeline/data/problems.py)."""
    datasets: list[Dataset] = field(default_factory=lambda: ["gsm8k", "math", "math500", "gsm-synth"])
    """Which datasets to prepare."""
    dedup_math_train: bool = True
    """Drop MATH train problems whose text also appears in MATH-500 (count is reported)."""
    synth_train_size: int = 20000
    """gsm-synth: number of training problems."""
    synth_test_size: int = 500
    """gsm-synth: number of test problems (disjoint from train by question text)."""
    synth_min_steps: int = 1
    """gsm-synth: fewest arithmetic steps per problem."""
    synth_max_steps: int = 3
    """gsm-synth: most arithmetic steps per problem."""
    synth_max_number: int = 20
    """gsm-synth: largest number that appears in a problem statement."""
    synth_ops: list[SynthOp] = field(default_factory=lambda: ["+", "-", "*"])
    """gsm-synth: operations used in the steps (/ only where it divides evenly)."""
    synth_max_factor: int = 5
    """gsm-synth: largest multiplier / divisor in * and / steps."""
    synth_max_value: int = 100
    """gsm-synth: cap on every intermediate and final value (keeps the arithmetic learnable)."""
    synth_seed: int = 1234
    """gsm-synth: generator seed (same seed -> same files)."""
    synth_distractors: int = 0
    """gsm-synth: most sentences without a number mixed into a problem (each answered by a `same: <value>` line), so the number of solution lines no longer gives away the number of calculations."""
    synth_longer_size: int = 0
    """gsm-synth: problems in the `test_longer` split, each with synth_max_steps + 1 calculations (one more than any train/test problem: a generalisation test); 0 = no such split."""

    def __post_init__(self):
        checks.check_data(self)


@dataclass
class ModelConfig:
    """The policy model: a local directory or hub id, optional LoRA, and the tiny-model builder."""

    name_or_path: str = "data/models/tiny-sft"
    """Model to train or evaluate: a local directory (save_pretrained layout) or a hub id."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype of the trained policy."""
    lora: bool = False
    """Train a LoRA adapter (peft) instead of all weights; the reference is the base model."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA alpha (scale = alpha / r)."""
    lora_dropout: float = 0.0
    """LoRA dropout."""
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    """Module names that get LoRA adapters."""
    gradient_checkpointing: bool = False
    """Trade compute for memory in the backward pass."""
    tiny_dir: str = "data/models/tiny-base"
    """Where `mathrl build-tiny` writes the untrained tiny model and tokenizer."""
    tiny_hidden_size: int = 128
    """Tiny model width (head_dim = hidden / heads must be >= 32 for vLLM's CPU backend)."""
    tiny_layers: int = 4
    """Tiny model depth."""
    tiny_heads: int = 4
    """Tiny model attention heads."""
    tiny_kv_heads: int = 2
    """Tiny model key/value heads (grouped-query attention)."""
    tiny_intermediate_size: int = 512
    """Tiny model MLP width."""
    tiny_tie_embeddings: bool = True
    """Tie input embeddings and the LM head."""
    tiny_max_positions: int = 512
    """Tiny model context length."""
    tiny_vocab_size: int = 1024
    """Tiny tokenizer vocabulary size (BPE trained offline; every digit is its own token)."""

    def __post_init__(self):
        checks.check_model(self)


@dataclass
class PromptConfig:
    """How a problem becomes a prompt (templates live in pipeline/prompts.py)."""

    template: TemplateName = "gsm8k"
    """Prompt template name: `gsm8k` (#### answer), `math` (\\boxed{}), `plain` (question only); all in pipeline/prompts.py."""
    chat: bool = True
    """Wrap the prompt with the tokenizer's chat template (if it has one)."""
    few_shot: int = 0
    """Number of worked examples put in front of the question (GSM8K 8-shot uses 8)."""

    def __post_init__(self):
        checks.check_prompt(self)


@dataclass
class RolloutConfig:
    """Sampling completions from the policy."""

    engine: Literal["hf", "hf_process", "vllm", "vllm_server"] = "hf"
    """`hf`: Hugging Face generate (any machine); `hf_process`: the same in a worker process of its own, so that generation overlaps the update (train.async_staleness, docs/pipelined.md); `vllm`: colocated vLLM engine (one per rank under torchrun); `vllm_server`: a separate `mathrl vllm-serve` process."""
    worker_threads: int = 0
    """hf_process: torch threads of the worker process (0 = half the trainer's, at least 1); the trainer keeps the rest, at least 1."""
    worker_timeout_s: float = 600.0
    """hf_process: a batch the worker has not answered in this many seconds ends the run with an error (the worker is stopped), instead of a hang."""
    group_size: int = 8
    """G: completions sampled per question."""
    max_new_tokens: int = 256
    """Longest completion in tokens; longer ones are truncated (finish_reason=length)."""
    temperature: float = 1.0
    """Sampling temperature (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    batch_size: int = 64
    """Sequences generated at once by the HF engine."""
    shared_prefill: bool = False
    """HF engine: prefill each prompt once for its G samples instead of once per sample (pipeline/rollout/prefill.py); the same logits up to float rounding, not bitwise."""
    decode: Literal["generate", "loop"] = "generate"
    """HF engines: `generate` (transformers' generate) or `loop`: a plain decode loop where a row that has ended leaves the batch (pipeline/rollout/decode_loop.py); the same samples, bitwise until the first row ends, then up to float rounding. Needs seeded or greedy sampling and a generation config without logits processors."""
    gpu_memory_utilization: float = 0.3
    """vLLM: fraction of GPU memory the colocated engine may take."""
    vllm_max_model_len: int = 2048
    """vLLM: maximum prompt + completion length (capped at the model's max_position_embeddings)."""
    vllm_enforce_eager: bool = True
    """vLLM: disable CUDA graphs (faster start, needed on CPU)."""
    vllm_sleep_mode: bool = False
    """vLLM (GPU): free the engine's memory during the policy update."""
    tis_cap: float = 0.0
    """Importance sampling cap C for vLLM/trainer logprob mismatch (0 = off): weights past it are truncated to C (`tis`) or zeroed (`mis`), see rollout.is_correction."""
    is_correction: ISCorrection = "tis"
    """With rollout.tis_cap > 0: `tis` truncates the weight exp(trainer - engine logp) at the cap, `mis` (masked importance sampling) sets it to 0 past the cap (pipeline/rollout/tis.py)."""
    is_level: ImportanceLevel = "token"
    """With rollout.tis_cap > 0: one weight per token, or per completion (`sequence`: the product of its token ratios, given to all its tokens)."""
    server_host: str = "127.0.0.1"
    """vllm_server: host `mathrl vllm-serve` listens on and the trainer connects to."""
    server_port: int = 8000
    """vllm_server: HTTP port of `mathrl vllm-serve`."""
    server_timeout_s: float = 600.0
    """vllm_server: a request or weight broadcast that takes longer fails with an error naming the server instead of hanging; on the server, the longest a weight update may take from its announcement (then it expires)."""
    server_token_file: str = ""
    """vllm_server: file whose first line is the shared token the server asks of every client (the environment variable MATHRL_SERVER_TOKEN, if set, is used instead); never the token itself: configs are saved into run directories."""
    server_allow_no_token: bool = False
    """vllm_server: let `mathrl vllm-serve` run without a token; only with a loopback server_host, and then every local user and process can drive it."""
    server_max_n: int = 256
    """vllm_server: most samples per prompt one /generate request may ask for."""
    server_max_prompts: int = 1024
    """vllm_server: most prompts in one /generate request (the client splits larger lists)."""
    server_max_body_mb: int = 16
    """vllm_server: largest request body in MiB (larger ones get HTTP 413)."""
    server_read_timeout_s: float = 30.0
    """vllm_server: seconds a client has to send a whole request (headers and body) once connected or after its previous reply."""
    server_max_connections: int = 64
    """vllm_server: open connections with the token the server keeps; more are answered 503 and closed."""
    server_max_unauth_connections: int = 16
    """vllm_server: open connections that have not yet sent the token; past it the oldest is answered 503 and closed."""
    server_auth_timeout_s: float = 2.0
    """vllm_server: seconds a new connection has to send a request carrying the token, else it is closed."""
    server_batch_window_s: float = 0.02
    """vllm_server: how long the server waits after a /generate request for others (e.g. the other ranks') to batch into one engine call."""
    server_weight_backend: Literal["auto", "gloo", "nccl"] = "auto"
    """vllm_server: weight broadcast backend; `auto` = NCCL when the policy and the server are on different GPUs, else gloo (CPU)."""
    tools: list[Tool] = field(default_factory=list)
    """Tools the policy may call mid-completion (tool-integrated reasoning, docs/tir.md): `[python]` = the rollout stops where a ```python block closes, the sandbox runs it and a ```output block with what it printed is appended, then generation resumes (pipeline/rollout/multi_turn.py); tool-output tokens are out of the loss. Empty (the default) = off. Engines `hf`, `hf_process` (seeded or greedy sampling), the colocated `vllm`, and `vllm_server`, whose server runs the tool (started with the same rollout.tool* settings)."""
    max_tool_calls: int = 4
    """rollout.tools: code blocks run per completion; later blocks are not stopped at nor run."""
    tool_output_chars: int = 512
    """rollout.tools: characters of a call's printed output put back in the completion (the rest is cut, with a marker)."""
    tool_timeout_s: float = 5.0
    """rollout.tools: wall-clock limit of one code block in the sandbox; past it the call is stopped and its output says so."""
    tool_workers: int = 4
    """rollout.tools: sandbox worker slots; the code blocks waiting in one decode turn run this many at a time."""
    tool_sandbox_backend: SandboxBackend = "auto"
    """rollout.tools: sandbox backend running the policy's code (`auto`: docker, else bwrap; see sandbox/)."""
    seed_block: int = 0
    """Questions per seeded generate call (seed from the first one's draw index in the run); 0 = a step's questions in one call (one process) or 1 (ranks > 1). Sampling is always seeded."""

    def __post_init__(self):
        checks.check_rollout(self)


@dataclass
class RewardConfig:
    """Rule-based rewards (package `rewards`), combined as a weighted sum."""

    weights: dict[str, float] = field(default_factory=lambda: {"correct": 1.0, "format": 0.1})
    """Reward name -> weight; names come from `rewards.REWARDS`."""
    style: Literal["auto", "gsm8k", "math"] = "auto"
    """Answer extraction style passed to the checkers."""
    workers: int = 2
    """Processes that score completions in parallel."""
    timeout: float = 5.0
    """Seconds one completion's outcome check may take in all (reading, every comparison) before it counts as wrong."""
    audit_sample: int = 16
    """Completions per step graded again by math-verify; `reward/disagree_mv` logs how often it and our checker disagree (cases in <run>/audit_mv.jsonl, a warning when it climbs). 0 = off."""
    policy: Literal["strict", "lenient"] = "strict"
    """Answer policy of the correct/steps rewards: `strict` pays only one final statement that parses completely in the closed answer grammar (rewards/outcome/strict.py, docs/rewards.md); `lenient` reads natural forms (for evaluating other models)."""
    sandbox_backend: SandboxBackend = "auto"
    """Sandbox backend for the code reward (`auto`: docker, else bwrap; see sandbox/)."""
    truncated_zero: bool = False
    """Training reward 0 for completions cut at rollout.max_new_tokens (finish_reason=length), as Oat's Dr. GRPO recipe; they stay in the loss (train.mask_truncated drops them instead)."""
    charge_missing_steps: bool = True
    """train.advantage=process: a wrong answer also pays the step penalty for each calculation of the problem's reference solution it did not write, so leaving a step out costs what a refuted one does (rewards/steps/reward.py, docs/process_supervision.md)."""
    prm: str = ""
    """Process reward model for train.advantage=process and `mathrl eval-prm`: a local directory or hub id of the Qwen2.5-Math-PRM family (steps joined by `<extra_0>`, P(step good) at each separator; docs/process_supervision.md); empty = rule-checked steps only."""
    prm_mix: Literal["rule_overrides", "weighted", "prm_only"] = "rule_overrides"
    """How PRM probabilities and rule checks combine per step: a refuted claim makes the step wrong whatever the PRM says (`rule_overrides`), a weighted mean (`weighted`, weight reward.prm_rule_weight on the rule), or the PRM alone (`prm_only`)."""
    prm_rule_weight: float = 0.5
    """prm_mix=weighted: the rule verdict's weight (1 for claims that hold, 0 for a refuted one) where the rules have one."""
    prm_threshold: float = 0.5
    """A step whose mixed P(correct) is below this is wrong: its reward is -penalty * (threshold - p) / threshold (the clip of Gao et al. 2024), and eval-prm flags it."""
    prm_batch_size: int = 8
    """Sequences per PRM forward pass."""
    prm_max_tokens: int = 4096
    """Longest PRM input in tokens; steps past it get no PRM score (the rules alone judge them)."""
    prm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """PRM weights' dtype: `auto` is bfloat16 on a GPU, float32 on CPU."""

    def __post_init__(self):
        checks.check_reward(self)


@dataclass
class TrainConfig:
    """GRPO updates (`mathrl train`)."""

    task: str = "gsm-synth"
    """Training data: a prepared dataset (one with a train split, any of data.datasets' choices but math500) or a JSONL path; `+` joins several (`gsm8k+math`: both train sets, interleaved in proportion)."""
    steps: int = 100
    """Training steps: one rollout batch each, updated with num_iterations x mini_batches optimizer steps."""
    questions_per_step: int = 16
    """Questions sampled per step; each gets rollout.group_size completions."""
    micro_batch_size: int = 16
    """Completions per forward/backward pass (gradient accumulation over the batch)."""
    micro_batch_tokens: int = 0
    """Token budget per forward/backward pass instead of a row count (0 = off: micro_batch_size rows): groups in order of their longest completion, cut where rows x longest completion would pass the budget (verl's dynamic batch size). With forward_layout trimmed or shared_prompt, micro-batches of similar lengths compute less padding; the same loss but for bnpo (pipeline/micro_batches.py). Not under FSDP."""
    num_iterations: int = 1
    """mu: passes over each rollout batch (old log-probs computed once when updates_per_step > 1)."""
    mini_batches: int = 1
    """Optimizer steps per pass: the batch is split into this many mini-batches of whole groups (the j-th takes every mini_batches-th group, the same split on any number of ranks), each normalised as a batch of its own and followed by an optimizer step (verl's ppo_mini_batch_size = questions_per_step / mini_batches)."""
    lr: float = 1e-5
    """Peak learning rate (AdamW)."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """Shape after warmup."""
    warmup_steps: int = 0
    """Linear warmup, in optimizer steps."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    """AdamW betas."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (0 = off)."""
    advantage: Supervision = "outcome"
    """Outcome supervision (one advantage per completion) or process (per step, DeepSeekMath 4.1.3)."""
    adv_scale: AdvScale = "group"
    """Divide by the group std (GRPO), batch std (ScaleRL's CISPO recipe), or not at all (Dr. GRPO)."""
    adv_norm: AdvNorm = "group"
    """Outcome advantages from the weighted reward sum (`group`, GRPO), from each reward.weights component normalised in its group then summed with its weight (`per_reward`, GDPO), or from the rewards' ranks in the group mapped onto [-1, 1] (`rank`, GOPO; adv_scale must stay `group`)."""
    adv_eps: float = 1e-4
    """Added to the std before dividing."""
    loss_type: LossType = "grpo"
    """Loss aggregation over tokens and sequences."""
    surrogate: Surrogate = "clip"
    """Per-token objective: `clip` (PPO/GRPO clipped ratio), `sapo` (soft sigmoid gate), `cispo` (REINFORCE on the detached ratio capped at train.cispo_cap), `vespo` (sequence weight W^k exp(lambda (1 - W))), `dppo` (ratio with a trust-region mask on the sampled token's probability); formulas and sources in docs/grpo_math.md."""
    sapo_tau_pos: float = 1.0
    """sapo: gate temperature for A > 0 (larger = the gradient fades faster off-policy; TRL's default)."""
    sapo_tau_neg: float = 1.05
    """sapo: gate temperature for A <= 0 (SAPO makes it larger than sapo_tau_pos)."""
    cispo_cap: float = 5.0
    """cispo: cap on the detached ratio weighting each token (ScaleRL's epsilon_max)."""
    vespo_k_pos: float = 2.0
    """vespo, A >= 0: power k of W^k exp(lambda (1 - W)) (down-weights W < 1; TRL's default)."""
    vespo_lambda_pos: float = 3.0
    """vespo, A >= 0: decay lambda (down-weights W > 1)."""
    vespo_k_neg: float = 3.0
    """vespo, A < 0: power k."""
    vespo_lambda_neg: float = 2.0
    """vespo, A < 0: decay lambda."""
    dppo_divergence: DppoDivergence = "tv"
    """dppo: total variation or KL between the old and the current policy at each position (binary or top-K: train.dppo_topk)."""
    dppo_delta: float = 0.15
    """dppo: trust-region radius on that divergence (the DPPO authors' scripts: 0.15 for tv, 0.05 for kl)."""
    dppo_topk: int = 0
    """dppo: 0 = the binary divergence (the sampled token against all others); K > 0 = the top-K one over the old policy's K most likely tokens, the sampled token and the rest (DPPO sec. 4.3; the old policy's top-K come from the trainer's old-log-prob forward, the engine returns nothing more)."""
    importance_level: ImportanceLevel = "token"
    """Token-level ratios (GRPO) or one per sequence (GSPO)."""
    clip_low: float = 0.2
    """Lower clip range: ratio >= 1 - clip_low."""
    clip_high: float = 0.2
    """Upper clip range: ratio <= 1 + clip_high (DAPO's clip-higher uses 0.28)."""
    beta: float = 0.04
    """KL coefficient; 0 skips the reference model entirely."""
    kl_estimator: KLEstimator = "k3"
    """KL estimator (k3 = Schulman's unbiased, always >= 0)."""
    kl_in: Literal["loss", "reward"] = "loss"
    """Put the KL penalty in the loss (GRPO) or, detached, in the reward (PPO style)."""
    ref_reset_every: int = 0
    """Copy the policy into the reference every K steps (iterative GRPO; 0 = never)."""
    sampling: Literal["uniform", "pass_rate"] = "uniform"
    """How questions are drawn: `uniform` (a seeded shuffle per epoch) or `pass_rate`: the same walk, but a question whose samples were all correct at its last draw is skipped for retire_epochs epochs and one whose samples were all wrong is drawn with probability unsolved_keep (pipeline/grpo/sampling.py)."""
    retire_epochs: int = 1
    """sampling=pass_rate: epochs an all-correct question sits out after its draw (0 = never retired)."""
    unsolved_keep: float = 0.5
    """sampling=pass_rate: probability that a question with no correct sample at its last draw is drawn again when the walk reaches it."""
    question_pool: int = 0
    """Draw GRPO's questions from the first N of `train.task`'s training split only (0 = all of them). pass_rate acts only on questions drawn before, so it needs more draws (steps x questions_per_step) than the pool holds: the CPU default's 600 x 16 never revisits one of its 20,000."""
    max_questions: int = 0
    """Stop after the first step at which GRPO has drawn this many questions, G rollouts each (0 = off: train.steps steps, whichever comes first). Runs that draw different numbers per step (train.dynamic_sampling refills, pass_rate skips cost none) then spend the same rollouts: `mathrl compare-sampling`. Pipelined, the batches drawn ahead count."""
    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal and resample questions to refill (DAPO)."""
    max_resample_rounds: int = 3
    """Dynamic sampling: extra rollout rounds allowed per step."""
    mask_truncated: bool = False
    """Exclude completions that hit max_new_tokens from the loss."""
    void_turn_filter: bool = False
    """rollout.tools: drop from the loss every completion that called the tool and has a void turn, a policy turn with neither a closed ```python block nor a final answer (SimpleTIR, Xue et al. 2025, arXiv:2509.02479; pipeline/grpo/void_turns.py)."""
    forward_layout: Literal["padded", "trimmed", "shared_prompt"] = "padded"
    """How the log-prob forwards (old/reference log-probs and the update) lay a micro-batch out: `padded` at the batch's full width; `trimmed` without the columns no row of the micro-batch uses; `shared_prompt` also forwards each group's shared prompt once, its completions on top of its KV cache. The same log-probs and gradients up to float rounding (pipeline/grpo/packing.py)."""
    skip_zero_advantage: bool = False
    """Leave rows whose gradient is exactly zero (all-zero advantage, no KL in the loss) out of the update's forward/backward; the loss keeps the full batch's normalisation, so the gradient is the same up to float summation order, not bitwise (pipeline/grpo/skipping.py; not under bnpo or FSDP). Loss statistics are then over the trained rows."""
    save_every: int = 50
    """Checkpoint every N steps (0 = only at the end)."""
    keep_checkpoints: int = 2
    """How many step checkpoints to keep."""
    resume: str = "auto"
    """`auto`: continue from the run dir's last checkpoint if there is one; `never`; or a path."""
    eval_every: int = 0
    """Evaluate on the task's test split every N steps (0 = off)."""
    eval_limit: int = 200
    """Test problems used by the periodic eval."""
    eval_on_start: bool = False
    """Also run the periodic eval before the first step (logged as step 0), as TRL's eval_on_start."""
    log_samples: int = 2
    """Sample completions written to samples.jsonl per step."""
    report_to: list[Literal[Tracker, "auto", "none"]] = field(default_factory=lambda: ["auto"])
    """Trackers that get every metrics.jsonl row and the resolved config (each must be installed); `[auto]` = tensorboard if installed, else none; `[]` = metrics.jsonl only. Stores: WANDB_MODE/WANDB_DIR (default the run dir), TRACKIO_DIR, MLFLOW_TRACKING_URI."""
    tracker_project: str = "mathrl"
    """Project (W&B, Trackio) or experiment (MLflow) the trackers file the run under; the run is named `name`."""
    warn_zero_std_frac: float = 0.8
    """Warn when more than this fraction of groups has zero reward variance."""
    dist_timeout_s: float = 1800.0
    """torchrun: seconds a rank waits for its peers in a collective before the job stops with an error."""
    master_dtype: Literal["float32", "model"] = "float32"
    """Parameters, gradients and AdamW state in float32 with forwards in model.dtype under autocast, or all in model.dtype (`model`: small updates round away in bfloat16)."""
    fsdp: bool = False
    """torchrun: shard parameters, gradients and optimizer state across ranks with FSDP2 (fully_shard) instead of replicating them."""
    async_staleness: int = 0
    """Pipelined GRPO (docs/pipelined.md): k >= 1 generates the next batches with weights at most k optimizer steps old while the trainer updates, correcting with the engine's log-probs (decoupled PPO, needs rollout.tis_cap > 0); 0 = the synchronous loop, exactly."""

    def __post_init__(self):
        checks.check_train(self)

    @property
    def updates_per_step(self) -> int:
        """Optimizer steps per rollout batch: num_iterations passes x mini_batches."""
        return self.num_iterations * self.mini_batches


@dataclass
class SFTConfig:
    """Supervised warm start (`mathrl sft`) on reference solutions."""

    task: str = "gsm-synth"
    """Training data: a prepared dataset name or a JSONL path."""
    init: str = "data/models/tiny-base"
    """Model to start from (directory or hub id)."""
    output: str = "data/models/tiny-sft"
    """Where the fine-tuned model is saved."""
    steps: int = 600
    """Optimizer steps."""
    batch_size: int = 32
    """Examples per step."""
    lr: float = 1e-3
    """Peak learning rate (AdamW, cosine decay)."""
    warmup_steps: int = 30
    """Linear warmup steps."""
    corrupt_frac: float = 0.3
    """`slip`: fraction of training solutions with one arithmetic step made wrong; `carry`: probability that each carry / borrow step is done the buggy way (so RL has room)."""
    corrupt_mode: Literal["slip", "carry"] = "slip"
    """`slip`: one random step off by 1, 2 or 10; `carry`: the forgotten-carry / forgotten-borrow bugs of Brown & Burton (1978), a systematic error (docs/cpu_default.md)."""
    tool_frac: float = 0.0
    """Tool-integrated reasoning (docs/tir.md): fraction of the uncorrupted training solutions rewritten to compute with a ```python block followed by the ```output block of its true output (pipeline/data/tir_solutions.py); the rest keep their calculator lines. 0 = none."""
    eval_limit: int = 200
    """Test problems for the greedy accuracy printed after training (0 = skip)."""
    micro_batch_tokens: int = 0
    """> 0: a step's examples sorted by length and forwarded in micro-batches of at most this many padded tokens, logits only where a completion token is predicted: the same loss with less padding (pipeline/sft.py). 0 = one forward padded to the step's longest example."""
    processes: int = 1
    """> 1: data-parallel SFT on this machine's CPU, each step's micro-batches shared between this many processes (one helper each beyond the first; gradients summed in shared memory, pipeline/sft_parallel.py). Needs micro_batch_tokens > 0. 2 on the 2-core CPU default, whose SFT runs one thread per process."""

    def __post_init__(self):
        checks.check_sft(self)


@dataclass
class EvalConfig:
    """Evaluation (`mathrl eval`)."""

    model: str = ""
    """What `mathrl eval` evaluates: a hub id, model dir, LoRA adapter dir, run dir or checkpoint; empty = the run's trained model `<output_dir>/<name>/final` if it exists, else model.name_or_path."""
    dataset: str = "gsm-synth"
    """A prepared dataset (any of data.datasets' choices) or a JSONL path in the prepared schema; `+` joins several."""
    split: Split = "test"
    """Split of a prepared dataset."""
    extra_splits: list[Split] = field(default_factory=list)
    """More splits of the same dataset evaluated with the same settings by `mathrl run` (before and after) and the periodic eval, e.g. gsm-synth's `test_longer`."""
    limit: int = 0
    """Evaluate only the first N problems (0 = all)."""
    n_samples: int = 1
    """Samples per problem; 1 with temperature 0 is greedy pass@1."""
    temperature: float = 0.0
    """Sampling temperature for eval (0 = greedy)."""
    ks: list[int] = field(default_factory=lambda: [1])
    """k values for pass@k and maj@k (each <= n_samples)."""
    max_new_tokens: int = 256
    """Longest completion in tokens."""
    compare_without_tools: bool = False
    """With rollout.tools: `mathrl run` also evaluates the model before and after GRPO with the tools off (the keys `notool_...` of the result line and report: the same model, which then writes its code's output itself)."""
    output_dir: str = ""
    """Where results go; empty = `<run dir>/eval/<dataset>` for a run dir or checkpoint,
    `<model dir>/eval/<dataset>` for another local model, `<output_dir>/<name>/eval/<dataset>` for a hub id."""

    def __post_init__(self):
        checks.check_eval(self)


@dataclass
class ExperimentConfig:
    """`mathrl experiment` (`make experiment`): outcome vs process supervision from one SFT checkpoint."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """GRPO seeds run for each supervision mode (the same seeds for both)."""
    workers: int = 0
    """Runs trained at once, each on one thread (0 = one per CPU core; 1 on a shared machine)."""

    def __post_init__(self):
        checks.check_experiment(self)


@dataclass
class RunConfig:
    """A whole run: what `mathrl <stage>` reads; saved resolved as `runs/<name>/config.yaml`."""

    name: str = "default"
    """Run name: outputs go to `<output_dir>/<name>/`."""
    output_dir: str = "runs"
    """Parent folder of run directories."""
    seed: int = 0
    """Seed for sampling, data order and initialisation."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """`auto` (cuda if torch sees a GPU, else cpu with a warning on stderr), `cpu`, or `cuda` (stops when there is no GPU); under torchrun it also picks the backend: gloo for cpu, NCCL for cuda."""
    stages: list[Stage] = field(default_factory=lambda: ["train", "eval"])
    """What `mathrl run` (`make train`) does, in order."""
    threads: int = 0
    """torch CPU threads for every stage, set and printed at its start (0 = torch's default, one per core: results may then depend on the machine's core count). Overrides OMP_NUM_THREADS."""
    deterministic: bool = False
    """torch.use_deterministic_algorithms(True, warn_only=True): ops with a deterministic variant use it."""
    cpu_isa: Literal["", "default", "avx2", "avx512", "portable"] = ""
    """Pin torch's and MKL's CPU kernels (ATEN_CPU_CAPABILITY, MKL_CBWR) so CPUs with different vector units compute the same floats; `avx2` covers any Intel x86-64 CPU of the last decade (MKL keeps its AVX2 branch for Intel: an AMD CPU runs its own); `portable` is AVX2 ATen kernels with MKL's COMPATIBLE branch, the same on Intel and AMD, with slower matrix products. Set by `mathrl` before torch loads; empty = the CPU's best."""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)

    def __post_init__(self):
        checks.check_run(self)
