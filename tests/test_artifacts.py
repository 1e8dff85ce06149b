"""Files that are not what they claim to be (papa.artifacts): each kind of bad file is a real one, made here by the
averaging script or the ranking run on a tiny model, then damaged, and run through the command that reads it. It
must stop with status 2, one `error:` line naming the file and what is wrong, no traceback and no output folder;
the original code's formats still load."""

import json
import re
import shutil

import numpy as np
import pytest
import torch
from cli_fixtures import command_error, run_command, tiny_bert, write_cola  # noqa: F401  (tiny_bert: a fixture)
from conftest import script
from conftest import run_command as run_process
from lm_fixtures import save_tiny_lm, write_text

from papa.artifacts import load_lambdas
from papa.errors import PapaError

T, LM_T, L, H = 16, 12, 3, 4  # tiny_bert (tests/tiny_encoders.py) at T; the tiny Llama (tests/tiny_decoders.py) at LM_T


@pytest.fixture(scope="module")
def encoder_files(tiny_bert, tmp_path_factory):
    """The averaging script's avgs/ (with --mean_corrections) and a ranking run's sort/ (with --best_of true) of
    the tiny BERT on a few CoLA rows."""
    root = tmp_path_factory.mktemp("encoder_files")
    cola = write_cola(root / "cola")
    run_command("glue_avgs", ["--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir", cola,
                              "--max_length", T, "--mean_corrections", "--output_dir", root / "avgs"])
    run_command("glue", ["--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir", cola,
                         "--max_seq_length", T, "--do_train", "--sort_calculating", "true", "--static_heads_dir",
                         root / "avgs", "--ranker", "taylor", "--ranker_max_samples", 4, "--best_of", "true",
                         "--use_freeze_extract_pooler", "true", "--num_train_epochs", 1, "--save_strategy", "no",
                         "--save_total_limit", 0, "--per_device_train_batch_size", 4, "--report_to", "none",
                         "--output_dir", root / "sort"])
    return root, tiny_bert, cola


@pytest.fixture(scope="module")
def decoder_files(tmp_path_factory):
    """A tiny Llama's averages (a decoder's lower-triangle avgs.pt) and its toeplitz structured_constants.pt."""
    root = tmp_path_factory.mktemp("decoder_files")
    model, train = save_tiny_lm("llama", root / "lm"), write_text(root / "train.txt", 24)
    valid = write_text(root / "valid.txt", 8, seed=1)
    for folder, extra in (("avgs", []), ("toeplitz", ["--constants", "toeplitz"])):
        run_command("glue_avgs", ["--model_name_or_path", model, "--task_name", "lm", "--train_file", train,
                                  "--max_length", LM_T, "--output_dir", root / folder, *extra])
    (root / "sort").mkdir()
    (root / "sort" / "sorted_heads.json").write_text(json.dumps([[la, h] for la in range(L) for h in range(H)]))
    return root, model, valid


def copy(root, folder, tmp_path):
    """A copy of a real folder of artifacts, to damage."""
    return shutil.copytree(root / folder, tmp_path / folder)


def damage(path, change):
    """Load a tensor file with torch, change what it holds, save it back."""
    torch.save(change(torch.load(path, weights_only=True)), path)


def refused(command, argv, tmp_path, capsys, *patterns):
    """The command stops on bad input: status 2, one `error:` line matching every pattern, no traceback (checked
    by cli_fixtures.command_error), and no output folder."""
    out = tmp_path / "out"
    line = command_error(command, [*argv, "--output_dir", out], capsys)
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    for pattern in patterns:
        assert re.search(pattern, line), line
    return line


def probe(files, avgs, sort=None, *extra, k=6):
    """An evaluation run of the tiny BERT with the first k heads of `sort`'s ranking replaced."""
    root, model, cola = files
    return ["--model_name_or_path", model, "--task_name", "cola", "--data_dir", cola, "--max_seq_length", T,
            "--do_eval", "--use_freeze_extract_pooler", "true", "--static_heads_dir", avgs, "--sorting_heads_dir",
            sort or root / "sort", "--static_heads_num", k, "--report_to", "none", *extra]


def lm_probe(files, avgs, *extra, k=6):
    root, model, valid = files
    return ["--model_name_or_path", model, "--task_name", "lm", "--validation_file", valid, "--max_seq_length", LM_T,
            "--do_eval", "--static_heads_dir", avgs, "--sorting_heads_dir", root / "sort", "--static_heads_num", k,
            "--report_to", "none", *extra]


def at(index, value):
    """A change that puts `value` at one flat position of a tensor."""
    def change(tensor):
        tensor = tensor.clone()
        tensor.view(-1)[index] = value
        return tensor
    return change


# ----------------------------------------------------------------------------- avgs.pt, both layouts

NEGATIVE = r"hold negative weights \(-0\.5 in layer \d\), which no attention gives"
NOT_FINITE = r"contain NaN or infinite values \(layer \d\); recompute them with the averaging script"
INTEGERS = r"hold int64 numbers where PAPA writes floats"

FULL_DAMAGES = {
    "negative": (at(100, -0.5), NEGATIVE),
    "nan": (at(7, float("nan")), NOT_FINITE),
    "infinite": (at(-1, float("inf")), NOT_FINITE),
    "integers": (lambda x: (x * 100).long(), INTEGERS),
    "another length": (lambda x: x[:, :, :8, :8].contiguous(), r"computed at length 8 but --max_seq_length is 16"),
    "another model": (lambda x: x[:2].contiguous(), r"2 layers x 4 heads, but the model has 3 x 4: .*another model"),
    "not square": (lambda x: x[..., :-1].contiguous(), r"must have shape \[layers, heads, T, T\]; got \[3, 4, 16, 15\]"),
}


@pytest.mark.parametrize("name", FULL_DAMAGES)
def test_avgs_pt_of_the_full_layout(name, encoder_files, tmp_path, capsys):
    change, pattern = FULL_DAMAGES[name]
    avgs = copy(encoder_files[0], "avgs", tmp_path)
    damage(avgs / "avgs.pt", change)
    refused("glue", probe(encoder_files, avgs), tmp_path, capsys, re.escape(str(avgs / "avgs.pt")) + "|avgs.pt",
            pattern)


def test_negative_averages_are_refused_in_the_ranking_run_too(encoder_files, tmp_path, capsys):
    avgs = copy(encoder_files[0], "avgs", tmp_path)
    damage(avgs / "avgs.pt", at(3, -0.5))
    root, model, cola = encoder_files
    refused("glue", ["--model_name_or_path", model, "--task_name", "cola", "--data_dir", cola, "--max_seq_length", T,
                     "--do_train", "--sort_calculating", "true", "--static_heads_dir", avgs, "--report_to", "none"],
            tmp_path, capsys, re.escape(str(avgs / "avgs.pt")), NEGATIVE)


def packed(change):
    """A change of a lower-triangle file's values (papa.method.layouts' layout 2)."""
    return lambda record: {**record, "values": change(record["values"])}


PACKED_DAMAGES = {
    "negative": (packed(at(200, -0.5)), NEGATIVE),
    "infinite": (packed(at(-1, float("inf"))), NOT_FINITE),  # in the last layer, whose heads stay dynamic at k = 6
    "integers": (packed(lambda v: (v * 100).long()), INTEGERS),
    "another length": (lambda r: {**r, "seq_len": LM_T - 1}, r"damaged lower-triangle file"),
    "another model": (packed(lambda v: v[:, :2].contiguous()), r"3 layers x 2 heads, but the model has 3 x 4"),
}


@pytest.mark.parametrize("name", PACKED_DAMAGES)
def test_avgs_pt_of_a_decoders_lower_triangles(name, decoder_files, tmp_path, capsys):
    change, pattern = PACKED_DAMAGES[name]
    avgs = copy(decoder_files[0], "avgs", tmp_path)
    assert "papa_layout" in torch.load(avgs / "avgs.pt", weights_only=True)  # the script wrote layout 2
    damage(avgs / "avgs.pt", change)
    refused("glue", lm_probe(decoder_files, avgs), tmp_path, capsys, re.escape(str(avgs / "avgs.pt")), pattern)


# ----------------------------------------------------------------------------- structured_constants.pt

STRUCTURED_DAMAGES = {
    "negative profile": (lambda r: {**r, "profile": r["profile"] - 0.5},
                         r"the profile weights in .* hold negative weights .*not attention averages"),
    "negative sink": (lambda r: {**r, "sink": -r["sink"] - 0.1}, r"the sink weights in .* hold negative weights"),
    "nan": (lambda r: {**r, "sink": at(1, float("nan"))(r["sink"])}, r"the sink weights in .* NaN or infinite"),
    "integers": (lambda r: {**r, "profile": r["profile"].long()}, r"the profile weights in .* int64 numbers"),
    "unknown kind": (lambda r: {**r, "kind": "banana"}, r"kind 'banana', not toeplitz or sink_window"),
    "no profile": (lambda r: {k: v for k, v in r.items() if k != "profile"}, r"lacks its sink and profile tensors"),
    "empty profile": (lambda r: {**r, "profile": r["profile"][..., :0]}, r"profile \[layers, heads, D ≥ 1\]"),
    "heads apart": (lambda r: {**r, "sink": r["sink"][:, :2]}, r"got \[3, 2, 1\] and \[3, 4, 12\]"),
    "another model": (lambda r: {**r, "sink": r["sink"][:2], "profile": r["profile"][:2]},
                      r"2 layers x 4 heads, but the model has 3 x 4"),
    "seq_len": (lambda r: {**r, "seq_len": 0}, r"records seq_len 0, not an integer ≥ 1"),
}


@pytest.mark.parametrize("name", STRUCTURED_DAMAGES)
def test_structured_constants_pt(name, decoder_files, tmp_path, capsys):
    change, pattern = STRUCTURED_DAMAGES[name]
    folder = copy(decoder_files[0], "toeplitz", tmp_path)
    damage(folder / "structured_constants.pt", change)
    refused("glue", lm_probe(decoder_files, folder, "--constants", "toeplitz"), tmp_path, capsys,
            re.escape(str(folder / "structured_constants.pt")), pattern)


# ----------------------------------------------------------------------------- mean_outputs.pt, output_corrections.pt

PER_POSITION_DAMAGES = {
    "nan": (at(5, float("nan")), r"contain NaN or infinite values; recompute them"),
    "integers": (lambda x: x.long(), INTEGERS),
    "another length": (lambda x: x[:, :, :8].contiguous(),
                       r"are for T = 8, but the constant matrices beside them are for T = 16: .*one averaging pass"),
    "another head size": (lambda x: x[..., :-1].contiguous(), r"must have shape \[layers, heads, T, 8\]; got"),
    "another model": (lambda x: x[:, :3].contiguous(), r"3 layers x 3 heads, but the model has 3 x 4"),
}
READERS = [("mean_outputs.pt", "best_of"), ("output_corrections.pt", "best_of"),
           ("output_corrections.pt", "mean_corrected")]


@pytest.mark.parametrize("file, mode", READERS)
@pytest.mark.parametrize("name", PER_POSITION_DAMAGES)
def test_mean_outputs_and_output_corrections(file, mode, name, encoder_files, tmp_path, capsys):
    change, pattern = PER_POSITION_DAMAGES[name]
    avgs = copy(encoder_files[0], "avgs", tmp_path)
    damage(avgs / file, change)
    refused("glue", probe(encoder_files, avgs, None, "--replace_heads_with", mode), tmp_path, capsys,
            re.escape(str(avgs / file)), pattern)


def test_mean_outputs_of_another_length_than_the_run(encoder_files, tmp_path, capsys):
    avgs = copy(encoder_files[0], "avgs", tmp_path)
    damage(avgs / "mean_outputs.pt", lambda x: x[:, :, :8].contiguous())
    refused("glue", probe(encoder_files, avgs, None, "--replace_heads_with", "mean_output"), tmp_path, capsys,
            r"mean_outputs.pt was computed at length 8 but --max_seq_length is 16")


# ----------------------------------------------------------------------------- best_of.csv, sorted_heads.json


BEST_OF_DAMAGES = {
    "head out of range": (lambda rows: rows[:1] + ["7,0,constant,0,0,0"] + rows[2:],
                          r"names head \[7, 0\], which a model with 3 layers x 4 heads lacks"),
    "unknown name": (lambda rows: rows[:1] + [",".join(rows[1].split(",")[:2] + ["median", "0", "0", "0"])] + rows[2:],
                     r"head \[0, 0\] chose 'median', but a choice is one of constant, mean_output, mean_corrected"),
    "missing head": (lambda rows: rows[:-1], r"has no choice for 1 heads \(the first \[2, 3\]\)"),
    "repeated head": (lambda rows: rows + [rows[1]], r"lists head \[0, 0\] twice; rerun the ranking run"),
    "no choice column": (lambda rows: [rows[0].replace("choice", "pick")] + rows[1:], r"is not a best_of file"),
    "not an integer": (lambda rows: rows[:1] + ["0.0" + rows[1][1:]] + rows[2:], r"layer and head must be integers"),
}


@pytest.mark.parametrize("name", BEST_OF_DAMAGES)
def test_best_of_csv(name, encoder_files, tmp_path, capsys):
    change, pattern = BEST_OF_DAMAGES[name]
    sort = copy(encoder_files[0], "sort", tmp_path)
    path = sort / "best_of.csv"
    path.write_text("\n".join(change(path.read_text().splitlines())) + "\n")
    refused("glue", probe(encoder_files, encoder_files[0] / "avgs", sort, "--replace_heads_with", "best_of"),
            tmp_path, capsys, re.escape(str(path)), pattern)


SORTED_HEADS_DAMAGES = {
    "duplicate": (lambda rows: rows[:2] + [rows[0]] + rows[3:], r"lists head \[\d, \d\] twice"),
    "another model": (lambda rows: [[5, 1]] + rows[1:], r"names head \[5, 1\], which .* lacks: .*another model"),
    "negative head": (lambda rows: [[0, -1]] + rows[1:], r"names head \[0, -1\]"),
    "three numbers": (lambda rows: rows[:1] + [rows[1] + [0]] + rows[2:], r"integer pairs; row 1 is \[\d, \d, 0\]"),
    "floats": (lambda rows: [[float(x) for x in rows[0]]] + rows[1:], r"integer pairs; row 0 is \[\d\.0, \d\.0\]"),
    "true": (lambda rows: [[True, rows[0][1]]] + rows[1:], r"row 0 is \[True, \d\]"),
    "an object": (lambda rows: {"heads": rows}, r"integer pairs, not an object"),
    "empty": (lambda rows: [], r"integer pairs, not an empty list"),
}


@pytest.mark.parametrize("name", SORTED_HEADS_DAMAGES)
def test_sorted_heads_json(name, encoder_files, tmp_path, capsys):
    change, pattern = SORTED_HEADS_DAMAGES[name]
    sort = copy(encoder_files[0], "sort", tmp_path)
    path = sort / "sorted_heads.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    line = refused("glue", probe(encoder_files, encoder_files[0] / "avgs", sort), tmp_path, capsys,
                   re.escape(str(path)), pattern)
    assert "rerun the ranking run" in line or "another model" in line, line


# ----------------------------------------------------------------------------- lambdas.npy (read by the sweep)


@pytest.mark.slow
def test_lambdas_npy_read_by_the_sweep(tiny_bert, tmp_path):
    """The sweep reads each ranking run's lambdas.npy for its stability table and λ figure: a damaged one (the
    stages up to date, so nothing redoes it) is one error line, and no result file is written."""
    out = tmp_path / "sweep"
    sweep = script("run_papa_sweep.py") + [
        "--model_name_or_path", tiny_bert, "--task_name", "cola", "--data_dir", write_cola(tmp_path / "cola"),
        "--max_seq_length", T, "--static_heads_nums", 0, L * H, "--num_train_epochs", 1, "--sort_num_train_epochs",
        1, "--bootstrap_samples", 50, "--output_dir", out]
    run_process(sweep)
    lambdas = out / "sort" / "lambdas.npy"
    good = np.load(lambdas)
    for array, pattern in ((np.where(np.arange(L * H).reshape(L, H) == 5, np.nan, good), r"NaN or infinite λ"),
                           (good[:2], r"holds λ of 2 x 4 heads, but sorted_heads.json beside it ranks 12 heads"),
                           (good.reshape(-1), r"float \[layers, heads\] array of λ; it holds float32 \[12\]"),
                           (good.astype(np.int64), r"it holds int64 \[3, 4\]")):
        np.save(lambdas, array)
        for name in ("results.md", "results.csv", "lambdas.png"):
            (out / name).unlink(missing_ok=True)
        proc = run_process(sweep, check=False)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert str(lambdas) in lines[0] and re.search(pattern, lines[0]), lines[0]
        assert not any((out / name).exists() for name in ("results.md", "results.csv", "lambdas.png"))


# ----------------------------------------------------------------------------- the original code's formats


def test_the_original_codes_formats_still_load(encoder_files, tmp_path):
    """avgs.pt a plain float [L, H, T, T] tensor (torch.save's zip and its older pickle format), sorted_heads.json
    a plain JSON list of [layer, head] pairs as json.dump writes it, lambdas.npy a plain float [L, H] array."""
    root, model, cola = encoder_files
    torch.manual_seed(0)
    averages = torch.rand(L, H, T, T)
    averages /= averages.sum(-1, keepdim=True)
    lambdas = np.random.default_rng(0).normal(size=(L, H)).astype(np.float32)
    ranking = [[int(i // H), int(i % H)] for i in np.argsort(lambdas.reshape(-1))]
    for zipped in (True, False):
        folder = tmp_path / f"original_{zipped}"
        folder.mkdir()
        torch.save(averages, folder / "avgs.pt", _use_new_zipfile_serialization=zipped)
        with open(folder / "sorted_heads.json", "w") as f:
            json.dump(ranking, f, indent=2)
        np.save(folder / "lambdas.npy", lambdas)
        run_command("glue", probe(encoder_files, folder, folder) + ["--output_dir", folder / "k_6"])
        assert "eval_matthews_correlation" in json.loads((folder / "k_6" / "eval_results.json").read_text())
        assert np.array_equal(load_lambdas(folder / "lambdas.npy", ranking), lambdas)
    np.save(tmp_path / "float64.npy", lambdas.astype(np.float64))
    assert load_lambdas(tmp_path / "float64.npy").dtype == np.float64
    with pytest.raises(PapaError, match=r"not a readable \.npy file"):
        (tmp_path / "junk.npy").write_bytes(b"not numpy")
        load_lambdas(tmp_path / "junk.npy")
