"""The sweep's plan: the model and task resolved once into everything the stages need (papa.sweep.run lays them
out): the model's heads and family, the k to probe, the hyper-parameters (the task's defaults where a flag is not
given), the rankers and controls."""

import os
from dataclasses import dataclass

from ..errors import PapaError, first_line
from ..method.rankers import PAPER, check_ranker_data, default_rankers
from ..models.modeling import default_model_path, local_model_path
from . import orderings
from .defaults import default_static_heads_nums, task_defaults


@dataclass(frozen=True)
class Plan:
    """Everything the stages need, resolved: the model, the k to probe, the hyper-parameters."""

    task: object  # papa.data.tasks.TaskSpec
    model_path: str
    layers: int
    heads_per_layer: int
    ks: list
    output_dir: str
    max_seq_length: int
    num_train_epochs: float
    sort_num_train_epochs: float
    learning_rate: float
    per_device_train_batch_size: int
    per_device_eval_batch_size: int
    avgs_batch_size: int
    evaluation_strategy: str
    controls: tuple = ()  # names of papa.sweep.controls.CONTROLS, in the order given
    seed: int = 42  # --seed: the averaging pass, the random order, and the probing runs without --seeds
    seeds: tuple | None = None  # --seeds: a probing run per seed, in <run>_seed_<s>/; None: today's layout
    rank_per_seed: bool = False  # a ranking run per seed (sort_seed_<s>/) instead of one with the first seed
    bootstrap_samples: int = 1000
    rankers: tuple = (PAPER,)  # --ranker, else default_rankers: the first ranks PAPA's runs (sort/), the others are orderings
    causal: bool = False  # a decoder
    unit_size: int = 1  # heads per ranked unit: a K/V group's query heads with --rank_kv_groups (random orders too)
    ranker_flags: tuple = ()  # ((ranker, flags of its ranking runs beyond --sort_calculating), ...)
    constants_file: str = "avgs.pt"  # what the averaging stage writes: structured_constants.pt with --constants
    lm_eval_tasks: tuple = ()  # --lm_eval_tasks: scored in every probing run (papa.evaluation.scoring)
    lm_eval_limit: int | None = None

    @property
    def total_heads(self):
        return self.layers * self.heads_per_layer

    @property
    def seed_runs(self):
        """[(seed, folder tag)]: the tag names the seed in run folders (papa.sweep.controls.run_folder); None
        without --seeds, whose runs keep the plain k_<k>/ folders."""
        return [(self.seed, None)] if self.seeds is None else [(s, s) for s in self.seeds]

    def ranking_folder(self, seed, ranker=None):
        """The ranking run whose sorted_heads.json the runs of `seed` read: the first ranker's (sort/), or
        `ranker`'s (sort_<ranker>/); _seed_<s> with --rank_per_seed."""
        name = "sort" if ranker in (None, self.rankers[0]) else f"sort_{ranker}"
        return os.path.join(self.output_dir, f"{name}_seed_{seed}" if self.rank_per_seed else name)

    @property
    def ranking_seeds(self):
        """The seeds of the ranking runs: each seed with --rank_per_seed, else the first."""
        return [s for s, _ in self.seed_runs] if self.rank_per_seed else [self.seed_runs[0][0]]


def model_heads(model_path, task=None):
    """(layers, heads per layer, K/V heads per layer) from the model's config; for the lm task, a decoder's
    (papa.models.pretrained.check_lm_model)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_path)
    except (OSError, ValueError) as err:
        raise PapaError(f"cannot load the config of model {model_path!r}: {first_line(err)}") from None
    if task is not None and task.kind == "lm":
        from ..models.pretrained import check_lm_model

        check_lm_model(config, model_path)
    layers, heads = getattr(config, "num_hidden_layers", None), getattr(config, "num_attention_heads", None)
    if not layers or not heads:
        raise PapaError(f"{model_path}: its config names no num_hidden_layers / num_attention_heads")
    return layers, heads, getattr(config, "num_key_value_heads", None) or heads


def is_decoder(model_path):
    """Whether the model is one of PAPA's decoder families (causal attention)."""
    from transformers import AutoConfig

    from ..families import FAMILIES

    family = FAMILIES.get(getattr(AutoConfig.from_pretrained(model_path), "model_type", None))
    return bool(family is not None and family.causal)


def model_display_name(model_name_or_path):
    if model_name_or_path is None:
        return "all-MiniLM-L6-v2 (bundled)"
    return os.path.basename(os.path.normpath(model_name_or_path)) or model_name_or_path


def make_plan(args, task):
    """The Plan for SweepArguments `args` on `task`: flags given, else the task's defaults."""
    defaults = task_defaults(task)
    # a .gguf file is converted here, once, before any stage (papa.models.gguf); the stages load the folder
    model_path = local_model_path(args.model_name_or_path) or default_model_path()
    layers, heads, kv_heads = model_heads(model_path, task)
    if args.static_heads_nums is None:
        ks = default_static_heads_nums(layers * heads)
    else:
        ks = sorted(set(args.static_heads_nums))
        bad = [k for k in ks if not 0 <= k <= layers * heads]
        if bad:
            raise PapaError(f"--static_heads_nums: {bad} outside 0..{layers * heads} (the model has {layers} layers "
                            f"x {heads} heads)")
    epochs = float(args.num_train_epochs or defaults["num_train_epochs"])
    causal = is_decoder(model_path)
    rankers = tuple(args.ranker or default_rankers(causal, args.ranker_loss))
    check_ranker_data(rankers, task.name, task.retrieval)
    return Plan(
        task=task, model_path=model_path, layers=layers, heads_per_layer=heads, ks=ks,
        output_dir=os.path.abspath(args.output_dir or os.path.join("outputs", f"papa_sweep_{task.name}")),
        max_seq_length=int(args.max_seq_length or defaults["max_seq_length"]),
        num_train_epochs=epochs,
        sort_num_train_epochs=float(args.sort_num_train_epochs or defaults["sort_num_train_epochs"] or epochs),
        learning_rate=float(args.learning_rate or defaults["learning_rate"]),
        per_device_train_batch_size=int(args.per_device_train_batch_size or defaults["per_device_train_batch_size"]),
        per_device_eval_batch_size=defaults["per_device_eval_batch_size"],
        avgs_batch_size=defaults["avgs_batch_size"],
        evaluation_strategy=defaults["evaluation_strategy"],
        controls=orderings.sweep_controls(args, rankers),
        rankers=rankers, ranker_flags=tuple(orderings.ranker_flags(args, rankers).items()), causal=causal,
        unit_size=heads // kv_heads if args.rank_kv_groups else 1,
        seed=args.seed, seeds=None if args.seeds is None else tuple(args.seeds), rank_per_seed=args.rank_per_seed,
        bootstrap_samples=args.bootstrap_samples, lm_eval_tasks=tuple(args.lm_eval_tasks or ()),
        lm_eval_limit=args.lm_eval_limit,
    )
