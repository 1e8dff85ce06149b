"""The scripts' runs: the averaging run and the probing run (run), their flags (arguments), metrics, per-example
predictions and result files (outputs)."""
