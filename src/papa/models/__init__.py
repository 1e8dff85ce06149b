"""Models: what a --model_name_or_path names (bundled: MiniLM, SmolLM2 and Gemma-3-270M; gguf: .gguf files converted
once), config and tokenizer loading (pretrained), building, training modes and save/reload of PAPA models (modeling), and the
freeze-extract probes (poolers)."""
