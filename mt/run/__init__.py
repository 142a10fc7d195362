"""The run folder: one directory per run (config, tokenizer, checkpoints, metrics, card) and the
records it holds. Everything that opens, writes or describes a run goes through here."""
