"""`mt export --format hf`: a run as a Hugging Face Transformers model folder. `export` maps the weights,
config and tokenizer (Pegasus or Marian, weight for weight), `generation` the decoding, with one table
entry a DecodeConfig field, and `card` writes the folder whole: its model card states the folder's own
scores, measured by reloading it.
"""
