"""papa.runs.arguments: the original flag spellings, honest booleans, and bad flags as one clear error."""

import pytest

from papa.runs.arguments import parse_training_args
from papa.runs.averaging_arguments import AveragingArguments, parse_averaging_args
from papa.sweep.arguments import SweepArguments, parse_sweep_args
from papa.errors import PapaError


def test_original_flag_spellings():
    model, data, training = parse_training_args(
        "--task_name COLA --do_train --do_eval --output_dir x --evaluation_strategy epoch --use_papa_preprocess "
        "--use_freeze_extract_pooler true --grad_for_classifier_only false --sort_calculating False "
        "--grad_for_classifier_and_static_only 0 --save_total_limit 0 --disable_tqdm true --static_heads_num 72 "
        "--max_seq_length 64 --pad_to_max_length --label_all_tokens --return_entity_level_metrics".split()
    )
    assert training.eval_strategy == "epoch" and training.save_total_limit == 0 and training.disable_tqdm
    assert data.use_papa_preprocess and data.pad_to_max_length and data.max_seq_length == 64
    assert model.use_freeze_extract_pooler and not model.grad_for_classifier_only and not model.sort_calculating
    assert not model.grad_for_classifier_and_static_only and model.static_heads_num == 72
    assert data.label_all_tokens and data.return_entity_level_metrics
    _, _, training = parse_training_args("--output_dir x --evaluation_strategy=steps".split())
    assert training.eval_strategy == "steps"


def test_averaging_flags_as_the_readme_writes_them():
    args = parse_averaging_args(
        "--task_name COLA --max_length 64 --per_device_train_batch_size 8 --output_dir d --cache_dir c "
        "--use_papa_preprocess true --pad_to_max_length --train_file t --validation_file v --seed 3".split()
    )
    assert isinstance(args, AveragingArguments)
    assert args.use_papa_preprocess is True and args.pad_to_max_length is True and args.seed == 3
    assert args.max_length == 64 and args.per_device_train_batch_size == 8 and args.task_name == "COLA"


@pytest.mark.parametrize("value, expected", [("true", True), ("True", True), ("1", True), ("yes", True),
                                             ("false", False), ("False", False), ("0", False), ("no", False)])
def test_booleans_parse_honestly(value, expected):
    assert parse_averaging_args(["--output_dir", "d", "--use_papa_preprocess", value]).use_papa_preprocess is expected
    model, _, _ = parse_training_args(["--output_dir", "d", "--sort_calculating", value])
    assert model.sort_calculating is expected


@pytest.mark.parametrize("argv, message", [
    (["--max_length", "0", "--output_dir", "d"], "--max_length must be positive"),
    (["--max_length", "abc", "--output_dir", "d"], "argument --max_length.*: invalid int value: 'abc'"),
    (["--task_name", "cola"], "--output_dir is required"),
    (["--output_dir", "d", "--not_a_flag", "1"], "not_a_flag"),
    (["--output_dir", "d", "--use_papa_preprocess", "maybe"], "use_papa_preprocess"),
])
def test_bad_averaging_flags(argv, message):
    with pytest.raises(PapaError, match=message):
        parse_averaging_args(argv)


def test_bad_training_flags():
    with pytest.raises(PapaError, match="one training mode"):
        parse_training_args("--output_dir x --sort_calculating --grad_for_classifier_only".split())
    with pytest.raises(PapaError, match="--max_eval_samples must be positive"):
        parse_training_args("--output_dir x --max_eval_samples -3".split())
    with pytest.raises(PapaError, match="argument --weight_decay.*: invalid float value"):
        parse_training_args("--output_dir x --weight_decay abc".split())


def test_sweep_flags_and_passthrough():
    args, passthrough = parse_sweep_args("--static_heads_nums 0 72 --num_train_epochs 1 --weight_decay 0.01 "
                                         "--verbose".split())
    assert isinstance(args, SweepArguments)
    assert args.static_heads_nums == [0, 72] and args.num_train_epochs == 1.0 and args.verbose
    assert args.task_name == "repeat" and args.max_seq_length is None  # None: the task's default
    assert passthrough == ["--weight_decay", "0.01"]
    # no abbreviations: --num_train is not --num_train_epochs, it goes to the training runs as it is
    assert parse_sweep_args(["--num_train", "3"])[1] == ["--num_train", "3"]
    with pytest.raises(PapaError, match="unexpected argument 'stray'"):
        parse_sweep_args(["stray"])
    with pytest.raises(PapaError, match="--learning_rate must be positive"):
        parse_sweep_args(["--learning_rate", "0"])
    with pytest.raises(PapaError, match="argument --static_heads_nums.*: invalid int value: 'x'"):
        parse_sweep_args(["--static_heads_nums", "x"])
