"""papa-benchmark's flags: what to benchmark, on what, how long, and where the report goes."""

import os
from dataclasses import dataclass, field

import torch

from ..errors import PapaError
from ..models.bundled import check_model_path
from ..models.modeling import default_model_path, local_model_path
from .workloads import FAMILY_CONFIGS, INFERENCE_VARIANTS, PADDED_ROWS, TRAINING_VARIANTS


@dataclass
class BenchmarkArguments:
    model_name_or_path: str | None = field(default=None, metadata={
        "help": "checkpoint of any supported family (folder, hub name, .gguf file, or `smollm2`, `gemma3`); default: the bundled all-MiniLM-L6-v2"})
    model_type: str | None = field(default=None, metadata={
        "choices": list(FAMILY_CONFIGS),
        "help": "instead of a checkpoint, a random model of this family at its base size "
                + ", ".join(f"({name}: {FAMILY_CONFIGS[name][0]})" for name in FAMILY_CONFIGS)
                + "; no checkpoint of DeBERTa or ModernBERT can be had offline, and speed does not depend on weights"})
    random_weights: bool = field(default=False, metadata={
        "help": "build the model from --model_name_or_path's config.json with random weights instead of loading them "
                "(speed does not depend on the weights): for a machine without the checkpoint, e.g. the GPU check"})
    tiny: bool = field(default=False, metadata={
        "help": "use a tiny random BERT (2 layers, 4 heads, hidden 32) instead: a smoke test in seconds"})
    sorted_heads: str | None = field(default=None, metadata={
        "help": "sorted_heads.json of this model (a ranking run's output): adds the 'ranked' inference variants, "
                "whose constant heads spread over the layers as the sweep's do"})
    device: str = field(default="cpu", metadata={"choices": ["cpu", "cuda"], "help": "where to run"})
    dtype: str = field(default="fp32", metadata={
        "choices": ["fp32", "fp16", "bf16"],
        "help": "inference: the stock and the PAPA models cast to this precision (the FLOP bounds do not change)"})
    compile: bool = field(default=False, metadata={
        "help": "inference: every model, stock and PAPA, through torch.compile(fullgraph=True) (compiled during "
                "the warm-up rounds), so compiled PAPA is timed against compiled stock"})
    threads: int | None = field(default=None, metadata={
        "help": "torch CPU threads (default: torch's choice). On a shared machine use fewer threads than idle "
                "cores: an intra-op thread that loses its core stalls every parallel region"})
    batch_size: int = field(default=32, metadata={"help": "batch size of every benchmark"})
    seq_lens: list[int] = field(default_factory=lambda: [64, 128], metadata={"help": "sequence lengths for inference"})
    repeats: int = field(default=15, metadata={
        "help": "timed rounds of inference; a round runs every variant once, with the stock model before and after each"})
    processes: int = field(default=1, metadata={
        "help": "run the inference rounds in this many fresh processes, one after another, and pool them: "
                "processes differ (memory layout, allocator and cache state) by more than one process's interval "
                "shows; with more than one, intervals come from a bootstrap over processes and their rounds"})
    variants: list[str] | None = field(default=None, metadata={
        "choices": list(INFERENCE_VARIANTS),
        "help": "inference variants to time against the stock model, quoted (default: all; the ranked ones need "
                "--sorted_heads): fewer variants, more rounds in the same time, narrower intervals"})
    padded_rows: str = field(default="all", metadata={
        "choices": list(PADDED_ROWS),
        "help": "inference: which rows of the batch have their last quarter padded, 'all' or 'every third' "
                "(issue 28's independent mixed-layer check); the rest run to full length"})
    warmup: int = field(default=1, metadata={"help": "untimed warm-up rounds (inference and training)"})
    avg_batches: int = field(default=8, metadata={"help": "N: batches in the averaging pass (memory: N and 4N)"})
    avg_seq_len: int = field(default=64, metadata={"help": "sequence length of the averaging pass"})
    avg_repeats: int = field(default=3, metadata={"help": "timed repetitions of each averaging variant"})
    train_seq_len: int = field(default=64, metadata={"help": "sequence length of the training step"})
    train_repeats: int = field(default=6, metadata={"help": "timed training steps per mode"})
    train_variants: list[str] | None = field(default=None, metadata={
        "choices": list(TRAINING_VARIANTS),
        "help": "training modes to time beside the stock probing step, quoted (default: all; 'probing' itself always "
                "runs, the reference)"})
    malloc_mmap_threshold: int = field(default=131072, metadata={
        "help": "CPU memory children call mallopt(M_MMAP_THRESHOLD, this many bytes), so freed tensors leave the "
                "RSS at once and peaks are reproducible; 0 keeps glibc's dynamic default"})
    skip: list[str] = field(default_factory=list, metadata={
        "choices": ["inference", "averaging", "training"], "help": "benchmarks to leave out"})
    json: str | None = field(default=None, metadata={
        "help": "write all figures to this JSON file (and the markdown table to the same path with .md)"})
    pool: list[str] | None = field(default=None, metadata={
        "help": "measure nothing: pool the paired rounds (inference, and training where a run kept them) of these "
                "earlier --json runs (same model, batch size and padding) and report each variant's paired ratio over all "
                "of them, every process of every run a cluster"})

    def __post_init__(self):
        check_model_path(self.model_name_or_path)  # a path to nothing, said first
        for name in ("batch_size", "repeats", "processes", "avg_batches", "avg_seq_len", "avg_repeats", "train_seq_len",
                     "train_repeats"):
            if getattr(self, name) <= 0:
                raise PapaError(f"--{name} must be positive; got {getattr(self, name)}")
        if self.warmup < 0 or any(t <= 0 for t in self.seq_lens):
            raise PapaError("--warmup must be ≥ 0 and --seq_lens positive")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise PapaError("--device cuda but CUDA is not available")
        if self.sorted_heads is not None and not os.path.exists(self.sorted_heads):
            raise PapaError(f"--sorted_heads {self.sorted_heads} does not exist")
        ranked = [v for v in self.variants or [] if INFERENCE_VARIANTS[v].heads == "ranked"]
        if ranked and self.sorted_heads is None:
            raise PapaError(f"--variants '{ranked[0]}' needs --sorted_heads (a ranking run's sorted_heads.json)")
        if not (self.tiny or self.model_type):  # last: a .gguf file is converted here (papa.models.gguf), after the checks
            self.model_name_or_path = local_model_path(self.model_name_or_path) or default_model_path()
