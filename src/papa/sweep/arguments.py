"""The sweep's command-line arguments (papa-sweep / run_papa_sweep.py), parsed as papa/runs/arguments.py parses every
command's: HF's `HfArgumentParser`, honest booleans, a PapaError for a bad flag or value; flags the sweep does not
know are passed through to the training runs."""

from dataclasses import dataclass, field

from ..method.rankers import RANKERS, with_distill_signal, without_distill_signal
from ..runs.arguments import SWEEP_CONTROLS, parse_dataclasses
from ..runs.flag_groups import LmEvalFlags, RankingFlags, RetrievalFlags, StructuredFlags
from ..errors import PapaError, check_positive, check_seed, check_writable_folder
from ..models.bundled import check_model_path


@dataclass
class SweepArguments(RankingFlags, StructuredFlags, RetrievalFlags, LmEvalFlags):
    """papa-sweep / run_papa_sweep.py. None means the task's default (papa.sweep.defaults)."""

    # one value, or several: a grid of every model x task (task_names / model_names list them either way)
    model_name_or_path: str | None = field(default=None, metadata={
        "nargs": "+", "help": "Model(s) of any supported family, encoder or decoder (hub name, folder, .gguf "
                              "file, or `smollm2`, `gemma3`: the bundled SmolLM2-135M-Instruct, "
                              "Gemma-3-270M); several run a grid. Default: the bundled all-MiniLM-L6-v2 (6 x 12 heads)."})
    task_name: str | None = field(default=None, metadata={
        "nargs": "+", "help": "GLUE task (cola sst2 mrpc qqp stsb mnli qnli rte wnli), token task (ner pos chunk), "
                              "lm (language modelling of --train_file/--validation_file plain text by a decoder; "
                              "lm_qnli / lm_mrpc: of the sentences of GLUE's QNLI / MRPC TSVs in --data_dir), "
                              "or the built-in synthetic 'repeat' (default; needs no data); several run a grid. "
                              "Omit it with --train_file/--validation_file (CSV/JSON with a 'label' column) for "
                              "your own sequence task."})
    data_dir: str | None = field(default=None, metadata={
        "help": "Folder with the task's files (GLUE train.tsv/dev.tsv, CoNLL train.txt/valid.txt), or a root holding "
                "one folder per task under its official name (CoLA, SST-2, ..., conll2003), directly or one level "
                "down (e.g. ../shared/data)."})
    controls: list[str] | None = field(default=None, metadata={
        "choices": SWEEP_CONTROLS, "help": "Control runs beside PAPA at the same k: uniform (constant heads attend "
                                           "equally to every real token), random_order (heads taken in a seeded "
                                           "random order, not the ranking), mean_output (heads output their "
                                           "training-set mean), zero_output (heads output 0), first_token (heads "
                                           "attend only to the first token), trained_constant (the constant "
                                           "matrices trained with the probe on the task's loss, from the "
                                           "averages), mean_corrected (constant matrices plus E[A V] - A_avg E[V], "
                                           "so each head outputs its own mean on average), optimal_output (constant "
                                           "outputs trained on the task's loss from the mean outputs), best_of "
                                           "(per head the one of constant, mean_output and mean_corrected that "
                                           "loses least alone on the ranking data: sort/best_of.csv)."})
    ranker: list[str] | None = field(default=None, metadata={
        "nargs": "+", "choices": tuple(RANKERS), "help": "How the heads are ranked (papa.method.rankers; run_papa_glue.py "
        f"--ranker): {', '.join(RANKERS)} (lambda: the original's trained mixing weights). Default: lambda on an "
        "encoder (the paper's), taylor on a decoder (it beats random orders where λ sits among them: "
        "docs/rankers.md). Several rank side by side: the first ranks PAPA's runs "
        "(sort/, k_<k>/), each other one its own (sort_<name>/, <name>_k_<k>/), compared with PAPA and with the "
        "random orders in the results."})
    random_orders: int = field(default=1, metadata={
        "help": "Random orders of the heads to compare the rankers with (with the random_order control, or when "
                "N > 1, which adds it): order 1 is random_order/, order i random_order_<i>/ (seeded by --seed and "
                "i); their spread and each ranker's differences from each order and from their mean are reported."})
    train_file: str | None = field(default=None, metadata={"help": "Training file, passed to every stage."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation file, passed to the training runs."})
    output_dir: str | None = field(default=None, metadata={
        "help": "Where the stages and results go. Default: outputs/papa_sweep_<task>."})
    static_heads_nums: list[int] | None = field(default=None, metadata={
        "help": "Numbers of constant heads to probe. Default: 0, 1/2, 7/8, 15/16 and all of the model's heads "
                "(0 36 63 68 72 for MiniLM, 0 72 126 135 144 for BERT-base).", "metavar": "K"})
    num_train_epochs: float | None = field(default=None, metadata={"help": "Epochs of each probing run (task default)."})
    sort_num_train_epochs: float | None = field(default=None, metadata={
        "help": "Epochs of the ranking run (default: 1 for repeat, --num_train_epochs for other tasks)."})
    learning_rate: float | None = field(default=None, metadata={
        "help": "Learning rate (constant schedule) of the training runs (task default)."})
    per_device_train_batch_size: int | None = field(default=None, metadata={"help": "Training batch size (task default)."})
    max_seq_length: int | None = field(default=None, metadata={
        "help": "Sequence length T of avgs.pt and of every run (task default)."})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "Use only the first N training examples (for the averages too)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Evaluate on the first N validation examples only."})
    seed: int = field(default=42, metadata={"help": "Random seed of every stage (of the averaging pass and the "
                                                     "random_order control's order with --seeds)."})
    seeds: list[int] | None = field(default=None, metadata={
        "help": "Run every probing stage once per seed, in k_<k>_seed_<s>/ (controls alike); results.csv then has "
                "the mean over seeds, their std and intervals over seeds and examples. Default: --seed alone, in "
                "k_<k>/. Append seeds to a finished sweep to run only the new ones.", "metavar": "S"})
    rank_per_seed: bool = field(default=False, metadata={
        "help": "With --seeds: a ranking run per seed (sort_seed_<s>/), each seed probed with its own ranking. "
                "Default: one ranking run, with the first seed."})
    probe: str = field(default="freeze_extract", metadata={
        "choices": ("freeze_extract", "model_head"), "help": "The probe of a sequence or token task: freeze_extract "
        "(the original's: every layer's hidden states pooled over the positions) or model_head (the model's own "
        "classification head: BERT's [CLS] pooler, a decoder's last real token). A decoder with massive activations "
        "at its first position (SmolLM2) saturates freeze_extract: use model_head there (docs/smollm2.md)."})
    bootstrap_samples: int = field(default=1000, metadata={
        "help": "Resamples of the paired bootstrap behind each change's 95 percent interval (seeded: the same "
                "predictions give the same results.csv)."})
    cache_dir: str | None = field(default=None, metadata={"help": "Hub cache folder, passed to every stage."})
    extra_args: str = field(default="", metadata={
        "help": "More flags for the training runs, as one string: --extra_args=\"--weight_decay 0.01\" (with '='). "
                "Flags the sweep does not know are passed the same way, after its own, so they override its defaults."})
    verbose: bool = field(default=False, metadata={
        "help": "Also show each stage's full output (it always goes to <stage>/log.txt)."})
    # how the stages run (papa.sweep.launchers); docs/scale_out.md
    launcher: str = field(default="inline", metadata={
        "choices": ["inline", "local", "slurm"],
        "help": "inline: one stage at a time (default); local: up to --max_parallel stages at once on this machine; "
                "slurm: every stage one Slurm job (submitit). A stage starts when the stages it reads from are done."})
    max_parallel: int | None = field(default=None, metadata={
        "help": "--launcher local: at most N stages at once (default 1; with GPUs, also at most GPUs / "
                "--gpus_per_stage)."})
    cpus_per_stage: int | None = field(default=None, metadata={
        "help": "--launcher local: threads of each stage on CPU (default: the cores / --max_parallel)."})
    gpus_per_stage: int | None = field(default=None, metadata={
        "help": "--launcher local: GPUs of each stage, its own (CUDA_VISIBLE_DEVICES; default 1 when GPUs are visible)."})
    slurm_partition: str | None = field(default=None, metadata={
        "help": "--launcher slurm: the partition (default: the cluster's default)."})
    slurm_time_min: int | None = field(default=None, metadata={
        "help": "--launcher slurm: time limit of each stage's job, in minutes (default 60)."})
    slurm_cpus_per_stage: int | None = field(default=None, metadata={
        "help": "--launcher slurm: CPUs of each stage's job (default: --nproc_per_node)."})
    slurm_gpus_per_stage: int | None = field(default=None, metadata={
        "help": "--launcher slurm: GPUs of each stage's job (default 0: give 1, or --nproc_per_node, on a GPU cluster)."})
    slurm_mem_gb: float | None = field(default=None, metadata={
        "help": "--launcher slurm: memory of each stage's job in GB (default: the partition's)."})
    slurm_array_parallelism: int | None = field(default=None, metadata={
        "help": "--launcher slurm: at most N stage jobs queued or running at once (default: no limit)."})
    slurm_additional_parameters: str | None = field(default=None, metadata={
        "help": "--launcher slurm: more sbatch options as a JSON object, passed to submitit, e.g. "
                "'{\"account\": \"my_lab\", \"qos\": \"normal\"}'."})
    nproc_per_node: int = field(default=1, metadata={
        "help": "--launcher local or slurm: run each stage data-parallel as N processes under torchrun."})

    def __post_init__(self):
        for model in self.model_names:  # a path to nothing, said first
            check_model_path(model)
        if self.task_name is None and self.train_file is None and self.validation_file is None:
            self.task_name = "repeat"  # nothing to read: the built-in task
        self.check_sizes()
        self.check_lm_eval()
        self.check_seeds()
        check_writable_folder(self.output_dir or "outputs", "--output_dir")  # the default lies under outputs/
        self.drop_repeats()
        self.check_ranking()
        self.check_structured()
        self.check_rankers()

    def check_sizes(self):
        for flag in ("num_train_epochs", "sort_num_train_epochs", "learning_rate", "per_device_train_batch_size",
                     "max_seq_length", "max_train_samples", "max_eval_samples", "bootstrap_samples"):
            check_positive(getattr(self, flag), f"--{flag}")
        if self.static_heads_nums is not None and not self.static_heads_nums:
            raise PapaError("--static_heads_nums needs at least one value")
        if isinstance(self.random_orders, bool) or self.random_orders < 1:
            raise PapaError(f"--random_orders must be 1 or more; got {self.random_orders}")

    def check_seeds(self):
        check_seed(self.seed, "--seed")
        if self.seeds is None:
            if self.rank_per_seed:
                raise PapaError("--rank_per_seed ranks per seed of --seeds: add --seeds S1 S2 ... or drop it")
            return
        if not self.seeds:
            raise PapaError("--seeds needs at least one value")
        for seed in self.seeds:
            check_seed(seed, "--seeds")
        repeated = sorted({s for s in self.seeds if self.seeds.count(s) > 1})
        if repeated:  # most likely a typo; a seed run twice would count as two seeds in the std and intervals
            raise PapaError(f"--seeds lists {', '.join(map(str, repeated))} more than once: give each seed once")

    def drop_repeats(self):
        """Each model, task, control and ranker once, in the order given; a single value stays a plain string, as
        before the grid existed."""
        for name in ("task_name", "model_name_or_path"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):
                setattr(self, name, value[0] if len(value) == 1 else list(dict.fromkeys(value)))
        self.controls = list(dict.fromkeys(self.controls or []))
        self.ranker = list(dict.fromkeys(self.ranker)) if self.ranker else None  # None: the model's default

    def check_rankers(self):
        if self.ranker_parts and not any(RANKERS[r].parts for r in self.ranker or ()):
            raise PapaError("--ranker_parts splits a ranker's heads into parts: add --ranker "
                            f"{' or '.join(n for n, r in RANKERS.items() if r.parts)}, or drop it")
        bad = without_distill_signal(self.ranker or ())
        if self.ranker_loss == "distill" and bad:
            raise PapaError(f"--ranker_loss distill has no signal for {', '.join(bad)} (taylor's gradient of "
                            f"distillation is 0 at the stock model): rank with {with_distill_signal()}, or drop "
                            "--ranker_loss distill")

    @property
    def task_names(self):
        """The tasks asked for; [None] means a task of your own read off --train_file (papa.data.custom)."""
        return list(self.task_name) if isinstance(self.task_name, list) else [self.task_name]

    @property
    def model_names(self):
        """The models asked for; [None] means the bundled MiniLM."""
        return list(self.model_name_or_path) if isinstance(self.model_name_or_path, list) else [self.model_name_or_path]


def parse_sweep_args(argv, **parser_kwargs):
    """(SweepArguments, the flags it does not know: for the training runs)."""
    args, passthrough = parse_dataclasses(SweepArguments, argv, remaining=True, allow_abbrev=False, **parser_kwargs)
    if passthrough and not passthrough[0].startswith("-"):
        raise PapaError(f"unexpected argument {passthrough[0]!r} (flags the sweep does not know must start with --)")
    return args, passthrough
