"""The typed run config: one dataclass per stage; the text under each field is its documentation.

A YAML file in ``configs/`` sets sections by name (``data:``, ``model:``, ``train:`` ...) and
the command line overrides single keys (``train.lr=1e-5``). Defaults are written here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pipeline.config import checks


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
    datasets: list[str] = field(default_factory=lambda: ["gsm8k", "math", "math500", "gsm-synth"])
    """Which datasets to prepare: any of gsm8k, math, math500, gsm-synth."""
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
    synth_ops: list[str] = field(default_factory=lambda: ["+", "-", "*"])
    """gsm-synth: operations used in the steps (any of + - * /; / only where it divides evenly)."""
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

    template: str = "gsm8k"
    """Prompt template name: `gsm8k` (#### answer), `math` (\\boxed{}), `plain` (question only)."""
    chat: bool = True
    """Wrap the prompt with the tokenizer's chat template (if it has one)."""
    few_shot: int = 0
    """Number of worked examples put in front of the question (GSM8K 8-shot uses 8)."""


@dataclass
class RolloutConfig:
    """Sampling completions from the policy."""

    engine: Literal["hf", "vllm", "vllm_server"] = "hf"
    """`hf`: Hugging Face generate (any machine); `vllm`: colocated vLLM engine (one per rank under torchrun); `vllm_server`: a separate `mathrl vllm-serve` process."""
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
    gpu_memory_utilization: float = 0.3
    """vLLM: fraction of GPU memory the colocated engine may take."""
    vllm_max_model_len: int = 2048
    """vLLM: maximum prompt + completion length (capped at the model's max_position_embeddings)."""
    vllm_enforce_eager: bool = True
    """vLLM: disable CUDA graphs (faster start, needed on CPU)."""
    vllm_sleep_mode: bool = False
    """vLLM (GPU): free the engine's memory during the policy update."""
    tis_cap: float = 0.0
    """Truncated importance sampling cap C for vLLM/trainer logprob mismatch (0 = off)."""
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
    """Seconds one equivalence check may take before it counts as wrong."""
    sandbox_backend: str = "auto"
    """Sandbox backend for the code reward: auto, docker, bwrap or process."""
    truncated_zero: bool = False
    """Training reward 0 for completions cut at rollout.max_new_tokens (finish_reason=length), as Oat's Dr. GRPO recipe; they stay in the loss (train.mask_truncated drops them instead)."""
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
    """Training data: a prepared dataset name (gsm8k, math, gsm-synth) or a JSONL path; `+` joins several (`gsm8k+math`: both train sets, interleaved in proportion)."""
    steps: int = 100
    """Training steps: one rollout batch each, updated with num_iterations x mini_batches optimizer steps."""
    questions_per_step: int = 16
    """Questions sampled per step; each gets rollout.group_size completions."""
    micro_batch_size: int = 16
    """Completions per forward/backward pass (gradient accumulation over the batch)."""
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
    advantage: Literal["outcome", "process"] = "outcome"
    """Outcome supervision (one advantage per completion) or process (per step, DeepSeekMath 4.1.3)."""
    adv_scale: Literal["group", "batch", "none"] = "group"
    """Divide by the group std (GRPO), batch std, or not at all (Dr. GRPO)."""
    adv_eps: float = 1e-4
    """Added to the std before dividing."""
    loss_type: Literal["grpo", "bnpo", "dapo", "dr_grpo"] = "grpo"
    """Loss aggregation over tokens and sequences."""
    importance_level: Literal["token", "sequence"] = "token"
    """Token-level ratios (GRPO) or one per sequence (GSPO)."""
    clip_low: float = 0.2
    """Lower clip range: ratio >= 1 - clip_low."""
    clip_high: float = 0.2
    """Upper clip range: ratio <= 1 + clip_high (DAPO's clip-higher uses 0.28)."""
    beta: float = 0.04
    """KL coefficient; 0 skips the reference model entirely."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (k3 = Schulman's unbiased, always >= 0)."""
    kl_in: Literal["loss", "reward"] = "loss"
    """Put the KL penalty in the loss (GRPO) or, detached, in the reward (PPO style)."""
    ref_reset_every: int = 0
    """Copy the policy into the reference every K steps (iterative GRPO; 0 = never)."""
    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal and resample questions to refill (DAPO)."""
    max_resample_rounds: int = 3
    """Dynamic sampling: extra rollout rounds allowed per step."""
    mask_truncated: bool = False
    """Exclude completions that hit max_new_tokens from the loss."""
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
    report_to: list[str] = field(default_factory=lambda: ["auto"])
    """Trackers that get every metrics.jsonl row and the resolved config: any of tensorboard, wandb, trackio, mlflow (each must be installed); `[auto]` = tensorboard if installed, else none; `[]` = metrics.jsonl only. Stores: WANDB_MODE/WANDB_DIR (default the run dir), TRACKIO_DIR, MLFLOW_TRACKING_URI."""
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
    eval_limit: int = 200
    """Test problems for the greedy accuracy printed after training (0 = skip)."""


@dataclass
class EvalConfig:
    """Evaluation (`mathrl eval`)."""

    model: str = ""
    """What `mathrl eval` evaluates: a hub id, model dir, LoRA adapter dir, run dir or checkpoint; empty = the run's trained model `<output_dir>/<name>/final` if it exists, else model.name_or_path."""
    dataset: str = "gsm-synth"
    """gsm8k, math, math500, gsm-synth, or a JSONL path in the prepared schema."""
    split: str = "test"
    """Split of a prepared dataset."""
    extra_splits: list[str] = field(default_factory=list)
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
    stages: list[str] = field(default_factory=lambda: ["train", "eval"])
    """What `mathrl run` (`make train`) does, in order: any of build-tiny, sft, train, eval."""
    threads: int = 0
    """torch CPU threads for every stage, set and printed at its start (0 = torch's default, one per core: results may then depend on the machine's core count). Overrides OMP_NUM_THREADS."""
    deterministic: bool = False
    """torch.use_deterministic_algorithms(True, warn_only=True): ops with a deterministic variant use it."""
    cpu_isa: Literal["", "default", "avx2", "avx512"] = ""
    """Pin torch's and MKL's CPU kernels (ATEN_CPU_CAPABILITY, MKL_CBWR) so CPUs with different vector units compute the same floats; `avx2` covers any x86-64 CPU of the last decade. Set by `mathrl` before torch loads; empty = the CPU's best."""
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
