"""The method, independent of tasks and scripts: make heads constant (attention.patch_model), average attention into
the constant matrices (averaging), and rank heads by their trained mixing weights λ (ranking). The per-family
adapters and the constant heads' math are one layer down, in papa.families."""
