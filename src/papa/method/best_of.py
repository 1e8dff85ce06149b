"""best_of: per head, whichever input-independent replacement loses least on the ranking data.

Every replacement is a pair (C, c) per head, and a replaced head outputs norm(C·P)·V + c (papa.method.replacements).
best_of takes, for each head, the pair of the candidate (constant attention, mean output, mean_corrected) whose
single-head loss change on the ranking data is the smallest (ties: the first name in alphabetical order), and
composes the chosen pairs into one (C, c) set, which an ordinary `patch_model(constant_matrices=C,
output_corrections=c)` then applies to any set of heads. The choice is made on the ranking data, never on the data
it is evaluated on, and it is written to `best_of.csv` (layer, head, choice, each candidate's Δ) beside the
ranking's outputs, so the probing runs read it from the ranking folder.
"""

import csv
import io
import os

import torch

from ..artifacts import add_head
from ..errors import PapaError, first_line

CANDIDATES = ("constant", "mean_output", "mean_corrected")
BEST_OF_FILE = "best_of.csv"
REDO = "rerun the ranking run with --best_of true"


def best_of_choice(deltas):
    """(L, H) nested list of the candidate with the smallest loss change per head; `deltas`: {name: (L, H)} for
    every name of CANDIDATES (ties go to the name first in alphabetical order)."""
    missing = [n for n in CANDIDATES if n not in deltas]
    if missing:
        raise PapaError(f"best_of chooses among {', '.join(CANDIDATES)}; no loss changes for {', '.join(missing)}")
    L, H = deltas["constant"].shape
    return [[min(CANDIDATES, key=lambda n: (float(deltas[n][layer, head]), n)) for head in range(H)]
            for layer in range(L)]


def best_of_csv(deltas):
    """best_of.csv's text: one row per head, layer-major: layer, head, choice, delta_<candidate> for each."""
    choice = best_of_choice(deltas)
    lines = [",".join(["layer", "head", "choice", *(f"delta_{n}" for n in CANDIDATES)])]
    for layer, row in enumerate(choice):
        for head, name in enumerate(row):
            lines.append(",".join([str(layer), str(head), name,
                                   *(repr(float(deltas[n][layer, head])) for n in CANDIDATES)]))
    return "\n".join(lines) + "\n"


def read_best_of(folder, num_layers, num_heads):
    """(L, H) nested list of the chosen replacement names from `folder`/best_of.csv (or the file itself), checked:
    every head of the model once, each choice a candidate."""
    path = folder if str(folder).endswith(".csv") else os.path.join(folder, BEST_OF_FILE)
    if not os.path.isfile(path):
        raise PapaError(f"no {BEST_OF_FILE} in {os.path.dirname(path) or '.'}: the ranking run writes it with "
                        "--best_of true (the sweep: --controls best_of); pass that run's folder as "
                        "--sorting_heads_dir")
    choice = [[None] * num_heads for _ in range(num_layers)]
    seen = set()
    try:
        with open(path, newline="", encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise PapaError(f"cannot read {path} ({type(err).__name__}: {first_line(err)[:120]}); {REDO}") from None
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or not {"layer", "head", "choice"} <= set(reader.fieldnames):
        raise PapaError(f"{path} is not a best_of file: it needs the columns layer, head and choice; {REDO}")
    for row in reader:
        try:
            layer, head = int(row["layer"]), int(row["head"])
        except (TypeError, ValueError):
            raise PapaError(f"{path}: layer and head must be integers; got {row['layer']!r}, {row['head']!r}: "
                            f"{REDO}") from None
        add_head(seen, layer, head, path, num_layers, num_heads, made="it was chosen", fix=REDO)
        if row["choice"] not in CANDIDATES:
            raise PapaError(f"{path}: head [{layer}, {head}] chose {row['choice']!r}, but a choice is one of "
                            f"{', '.join(CANDIDATES)}; {REDO}")
        choice[layer][head] = row["choice"]
    missing = [[layer, head] for layer in range(num_layers) for head in range(num_heads)
               if choice[layer][head] is None]
    if missing:
        raise PapaError(f"{path} has no choice for {len(missing)} heads (the first {missing[0]}): it was chosen "
                        f"for another model; {REDO}")
    return choice


def check_best_of_inputs(avgs_dir):
    """A clear error, before any work, when the averaging folder lacks what the candidates read."""
    missing = [f for f in ("mean_outputs.pt", "output_corrections.pt") if not os.path.isfile(os.path.join(avgs_dir, f))]
    if os.path.isdir(avgs_dir) and missing:
        raise PapaError(f"best_of needs {' and '.join(missing)} in {avgs_dir}: run the averaging script with "
                        "--mean_corrections (it writes both beside avgs.pt)")


def best_of_pair(avgs_dir, ranking_dir, num_layers, num_heads, head_dim=None):
    """The best_of pair (C, c) of a model with `num_layers` x `num_heads` heads: the choice in `ranking_dir`'s
    best_of.csv, the candidates' pairs from the averaging folder (avgs.pt, mean_outputs.pt, output_corrections.pt)."""
    from .replacements import replacement_pairs

    choice = read_best_of(ranking_dir, num_layers, num_heads)
    check_best_of_inputs(avgs_dir)
    pairs = replacement_pairs(avgs_dir, CANDIDATES, num_layers, num_heads, head_dim)
    return compose_pairs(pairs, choice)


def compose_pairs(pairs, choice):
    """The best_of pair (C [L, H, T, T], c [L, H, T, d]): head (l, h) takes C and c from the pair of its choice
    (c None counts as zeros). `pairs`: {name: (C, c)} for the chosen names (papa.method.replacements)."""
    averages = next(C for C, _ in pairs.values())
    L, H, T, _ = averages.shape
    d = next(c.shape[-1] for _, c in pairs.values() if c is not None)
    constants = torch.zeros(L, H, T, T, dtype=averages.dtype)
    corrections = torch.zeros(L, H, T, d, dtype=averages.dtype)
    for layer in range(L):
        for head in range(H):
            C, c = pairs[choice[layer][head]]
            constants[layer, head] = C[layer, head]
            if c is not None:
                corrections[layer, head] = c[layer, head]
    return constants, corrections
