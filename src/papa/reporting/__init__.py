"""What a sweep's runs found, read back from their folders: tables, intervals, claims and figures.

    results.py        every run's eval_results.json → a sweep's results.csv, results_per_seed.csv, results.md
                      and its figures (papa.sweep.run calls write_results once its stages are done)
    aggregate.py      the seeds' tables merged: means, stds, and each change's interval
    intervals.py      the paired bootstrap over seeds and evaluation examples
    differences.py    each control's paired difference from PAPA;  claims.py  the paper's claims as a table
    orderings.py      each ranker against the random orders and their mean, results.md's table of them
    stability.py      the rankings' agreement between seeds and between tasks (ranking_stability.csv)
    lm_eval_table.py  --lm_eval_tasks' columns, table and figure
    summary.py        a grid's summary.csv, summary.md, summary.png (papa.sweep.grid calls write_summary)
    plots.py          the figures (matplotlib, Agg)
    compare.py        papa-compare: the paired difference between two finished sweeps

Reporting reads plans (papa.sweep.plan.Plan, handed to it) and folders and runs nothing: the folders' layout (which
folder holds which control's run, the stamp's name) is papa.run_folders', below both; it imports nothing of
papa.sweep, which calls it (tests/test_house.py checks it).
"""
