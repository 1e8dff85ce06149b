"""The flags more than one command takes, each declared, documented and validated once: a command's arguments inherit
the groups they take (papa.runs.arguments' ModelArguments and DataArguments, papa.runs.averaging_arguments'
AveragingArguments, papa.sweep.arguments' SweepArguments), so a flag has one help and one check wherever it is given.

    StructuredFlags  --constants, --sink_tokens, --window: what constant heads attend with (the averaging script
                     writes it, the runs read it, the sweep hands it to both)
    RetrievalFlags   --filler, --retrieval_depths: the retrieval tasks' data (every stage makes the same examples)
    RankingFlags     the ranking run's options that the sweep also takes and hands on to its ranking stages
    LmEvalFlags      --lm_eval_tasks, --lm_eval_limit, --lm_eval_data_dir: lm-eval's scores beside a run's own

A group's `check_<group>()` validates its flags, and the command's `__post_init__` calls it; the retrieval flags are
checked with the task they shape (papa.data.retrieval.check_retrieval_flags). tests/test_house.py checks that no
command declares a flag of a group again.
"""

from dataclasses import dataclass, field
from typing import Literal

from ..data.retrieval import FILLERS, KINDS as RETRIEVAL_KINDS
from ..data.tasks import get_task
from ..errors import PapaError, check_positive
from ..method.structured_averaging import CONSTANT_KINDS



@dataclass
class StructuredFlags:
    constants: str = field(default="full", metadata={
        "choices": tuple(CONSTANT_KINDS),
        "help": "What constant heads attend with: full (avgs.pt and the sums, T x T per head: the original); toeplitz "
                "(a causal decoder's structured constants, structured_constants.pt: per head a weight on the first "
                "--sink_tokens positions and a profile over relative distance, averaged straight from the data with "
                "no T x T tensor kept, applicable at any length); sink_window (StreamingLLM's pattern, uniform on the "
                "first --sink_tokens positions and the last --window; reads no data). The averaging script writes "
                "them, the runs read them from --static_heads_dir at any --max_seq_length (docs/long_context.md)."})
    sink_tokens: int | None = field(default=None, metadata={
        "help": "--constants toeplitz / sink_window: the first positions that are the sink (default 1 / 4; the "
                "averaging script's, a run reads them from structured_constants.pt)."})
    window: int | None = field(default=None, metadata={
        "help": "--constants sink_window: the recent positions each token attends to, itself included (default 64; "
                "a run checks it against structured_constants.pt); toeplitz: the profile cut to its first WINDOW "
                "distances, the constant heads' reach (their cache holds the sink and WINDOW - 1 positions; default: "
                "the whole profile)."})

    def check_structured(self):
        check_positive(self.sink_tokens, "--sink_tokens")
        check_positive(self.window, "--window")
        if self.window is not None and not CONSTANT_KINDS[self.constants].structured:  # a structured head's reach
            raise PapaError("--window is the structured constants' reach (sink_window's window, toeplitz's cut): add "
                            "--constants sink_window or toeplitz, or drop it")


@dataclass
class RetrievalFlags:
    filler: str = field(default="fixed", metadata={
        "choices": FILLERS,
        "help": "The retrieval tasks with needles (all but copy and common_words): the text the needles hide in: "
                "fixed (the same few sentences repeated, as in the landmark-attention pass-key test), or qnli / mrpc "
                "(natural sentences of GLUE's QNLI (Wikipedia) / MRPC (news) TSVs in --data_dir)."})
    retrieval_depths: list[float] | None = field(default=None, metadata={
        "metavar": "D",
        "help": "The retrieval tasks: the depths (fractions of the filler before the key, 0 to 1) the examples cycle "
                "through, example i at the (i mod n)-th (default: 0 0.25 0.5 0.75 1)."})


@dataclass
class RankingFlags:
    lambda_learning_rate: float | None = field(default=None, metadata={
        "help": "Learning rate of λ (--ranker lambda; default: --learning_rate) or of the gates (--ranker gates; "
                "default 0.02, DuoAttention's)."})
    ranker_loss: Literal["task", "distill"] = field(default="task", metadata={
        "help": "The loss rankers other than lambda measure: the task's (the probe's, or the LM loss), or distill: "
                "KL from the stock model's outputs (DuoAttention's; needs no labels). taylor's gradient of distill "
                "is 0 at the stock model, so it takes task."})
    rank_kv_groups: bool = field(default=False, metadata={
        "help": "Rank a decoder's K/V groups as units (all query heads of a group together: only then do its K "
                "projection and K cache go); lambda and gates rank a group by its heads' mean."})
    ranker_steps: int | None = field(default=None, metadata={
        "help": "--ranker gates: training steps of the gates (default: --max_steps, else the ranking run's epochs "
                "over its ranking data; the sweep's: --sort_num_train_epochs)."})
    ranker_max_samples: int | None = field(default=None, metadata={
        "help": "The rankers other than lambda rank on the first N training examples only (loo and iterative cost a "
                "forward per head; a probe still trains on all of them, and λ trains on them all)."})
    ranker_sample: str = field(default="first", metadata={
        "choices": ("first", "seeded"),
        "help": "Which N training examples --ranker_max_samples ranks on: the first N (default), or N drawn at random "
                "with the ranking run's seed, kept in the data's order (the sweep's --seeds with --rank_per_seed then "
                "ranks each seed on other examples, and results.md gives each ranker's agreement between its seeds' "
                "rankings)."})
    ranker_parts: int | None = field(default=None, metadata={
        "help": "--ranker loo in N parts, contiguous ranges of layers: the sweep runs each as a stage (a Slurm job "
                "under --launcher slurm) and merges them into the ranking one process makes; a ranking run scores "
                "the --ranker_part I-th into ranker_part.pt and stops (--ranker_merge merges)."})
    ranker_tasks: list[str] | None = field(default=None, metadata={
        "metavar": "TASK",
        "help": "The rankers other than lambda rank on these generated retrieval tasks' training examples (passkey, "
                "multikey, ...; --filler, --retrieval_depths as the run's) instead of the run's own training data: "
                "rank on one task family, score on another (default: the run's task).", "nargs": "+"})
    ranker_lengths: list[int] | None = field(default=None, metadata={
        "metavar": "T",
        "help": "The rankers other than lambda rank on examples of each of these lengths (a retrieval task's, "
                "generated at each; default: --max_seq_length alone), --ranker_max_samples of each task at each "
                "length, one per batch. Structured constants apply at every length; make them at the longest "
                "(docs/long_context.md).", "nargs": "+"})
    head_replacements: bool = field(default=False, metadata={
        "help": "With --sort_calculating (the sweep: its first ranker's ranking runs): also write "
                "head_replacements.csv and .png, per head the held-out loss change (the first evaluation split, "
                "--max_eval_samples) when it alone is replaced by each replacement: constant, mean_corrected, "
                "mean_output, zero_output, first_token (mean_corrected and mean_output read output_corrections.pt and "
                "mean_outputs.pt in --static_heads_dir: averaging --mean_corrections)."})

    def check_ranking(self):
        for flag in ("lambda_learning_rate", "ranker_max_samples", "ranker_steps", "ranker_parts"):
            check_positive(getattr(self, flag), f"--{flag}")
        for length in self.ranker_lengths or ():
            check_positive(length, "--ranker_lengths")
        for name in self.ranker_tasks or ():
            if get_task(name).retrieval is None:
                raise PapaError(f"--ranker_tasks {name}: the ranking mixture draws generated retrieval tasks "
                                f"({', '.join(RETRIEVAL_KINDS)}); rank on {name} as the run's own --task_name instead")
        if self.ranker_sample == "seeded" and self.ranker_max_samples is None:
            raise PapaError("--ranker_sample seeded draws the --ranker_max_samples examples to rank on: add "
                            "--ranker_max_samples N, or drop --ranker_sample")


@dataclass
class LmEvalFlags:
    lm_eval_tasks: list[str] | None = field(default=None, metadata={
        "help": "lm tasks: after --do_eval, also score the model with these lm-eval tasks (papa_sst2 papa_cola "
                "papa_mrpc papa_qnli papa_mnli papa_wnli papa_lm_qnli ..., reading --data_dir: docs/lm_eval.md) into "
                "lm_eval_results.json; the sweep scores every k and control so, beside its metric in results.md/csv "
                "and lm_eval.png. Needs lm-eval (pip install -e '.[lm-eval]')."})
    lm_eval_limit: int | None = field(default=None, metadata={
        "help": "--lm_eval_tasks: score the first N documents of each task only."})
    lm_eval_data_dir: str | None = field(default=None, metadata={
        "help": "--lm_eval_tasks: the data root they read (holding glue/SST-2/dev.tsv, ...). Default: --data_dir."})

    def check_lm_eval(self):
        check_positive(self.lm_eval_limit, "--lm_eval_limit")
