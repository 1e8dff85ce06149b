"""Score a model with the lm-eval tasks and keep what lm-eval measured: lm_eval_results.json (each task's metrics
and lm-eval's standard errors) and lm_eval_samples.jsonl (each document's own value of every metric, for paired
intervals: papa.evaluation.sample_metrics). The probing runs' --lm_eval_tasks end here, so the sweep scores
every k, and every control, with the model that run evaluated (trained constants included).
"""

import json
import os

from ..console import stage
from ..errors import PapaError
from ..io import atomic_files
from . import TASKS_DIR, require_lm_eval

RESULTS_FILE, SAMPLES_FILE = "lm_eval_results.json", "lm_eval_samples.jsonl"
BOOTSTRAP_ITERS = 1000  # lm-eval's bootstrap for the standard errors of mcc and f1 (its default, 100 000, takes minutes)


def check_lm_eval_run(task, data_args):
    """Before any heavy work: --lm_eval_tasks needs an lm task (the decoder's own LM head) and lm-eval."""
    if not data_args.lm_eval_tasks:
        return
    if task.kind != "lm":
        raise PapaError(f"--lm_eval_tasks scores a causal LM with its own LM head, but {task.name} is a {task.kind} "
                        f"task (a probe); use an lm task (lm, lm_qnli, lm_mrpc)")
    from .data import DATA_ENV

    require_lm_eval()
    needs_data = [t for t in data_args.lm_eval_tasks if t.startswith("papa_") and t != "papa_text"]
    if needs_data and not (data_args.lm_eval_data_dir or data_args.data_dir or os.environ.get(DATA_ENV)):
        raise PapaError(f"--lm_eval_tasks {' '.join(needs_data)} read local GLUE files: pass --lm_eval_data_dir (or "
                        f"--data_dir) with the folder holding glue/SST-2/dev.tsv, ...")


def evaluate_tasks(lm, tasks, data_dir=None, limit=None, metadata=None):
    """lm-eval's `simple_evaluate` of the lm-eval model `lm` on `tasks` (the project's task folder included),
    offline: (results {task: {metric: value, metric_stderr: value}}, samples {task: [{doc_id, metric: value}]},
    counts {task: documents scored})."""
    require_lm_eval()
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    metadata = dict(metadata or {}, **({"data_dir": os.path.abspath(data_dir)} if data_dir else {}))
    manager = TaskManager(include_path=TASKS_DIR, metadata=metadata)
    known = set(manager.all_tasks) | set(getattr(manager, "all_groups", ())) | set(getattr(manager, "all_tags", ()))
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise PapaError(f"lm-eval knows no task {', '.join(unknown)}; the project's are "
                        f"{', '.join(sorted(t for t in manager.all_tasks if t.startswith('papa_')))}")
    out = simple_evaluate(model=lm, tasks=list(tasks), task_manager=manager, limit=limit, log_samples=True,
                          bootstrap_iters=BOOTSTRAP_ITERS)
    results, samples, counts = {}, {}, {}
    for task, values in out["results"].items():
        results[task] = {key.split(",")[0]: value for key, value in values.items()
                         if "," in key and isinstance(value, (int, float))}
    for task, rows in out["samples"].items():
        samples[task] = [{"doc_id": row["doc_id"], **{m: row[m] for m in row["metrics"]}} for row in rows]
        counts[task] = len(rows)
    return results, samples, counts


def write_scores(results, samples, counts, output_dir, **config):
    """lm_eval_results.json and lm_eval_samples.jsonl in `output_dir`, together and atomically."""
    with atomic_files(output_dir) as tmp:
        with open(os.path.join(tmp, RESULTS_FILE), "w", encoding="utf-8") as f:
            json.dump({"results": results, "documents": counts, **config}, f, indent=2)
        with open(os.path.join(tmp, SAMPLES_FILE), "w", encoding="utf-8") as f:
            for task, rows in samples.items():
                for row in rows:
                    f.write(json.dumps({"task": task, **row}, default=float) + "\n")


def score_probing_model(model, tokenizer, data_args, output_dir, batch_size=8):
    """The probing run's --lm_eval_tasks: its model (PAPA-patched, constants as trained) scored, files written."""
    from .harness import PapaLM

    lm = PapaLM(pretrained=model.eval(), tokenizer=tokenizer, max_length=data_args.max_seq_length,
                batch_size=batch_size, device=str(next(model.parameters()).device))
    data_dir = data_args.lm_eval_data_dir or data_args.data_dir
    results, samples, counts = evaluate_tasks(lm, data_args.lm_eval_tasks, data_dir, data_args.lm_eval_limit)
    write_scores(results, samples, counts, output_dir, tasks=list(data_args.lm_eval_tasks),
                 limit=data_args.lm_eval_limit, max_length=data_args.max_seq_length)
    for task, values in results.items():
        stage(f"lm-eval {task}: " + ", ".join(f"{k}={v:.4f}" for k, v in values.items() if not k.endswith("_stderr")))
