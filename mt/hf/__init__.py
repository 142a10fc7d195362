"""`mt export --format hf`: a run as a Hugging Face Transformers model folder. `generation` maps the decoding,
with one table entry a DecodeConfig field; `card` writes the model card, which states the folder's own
scores, measured by reloading it; `export` maps the weights, config and tokenizer (Pegasus or Marian,
weight for weight) and writes the folder whole (`export_run`), the card last.
"""
