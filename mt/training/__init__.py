"""Training: the loop (train.py), its setup and finish (session.py), one update (step.py), and what they
stand on: the cleaning rules, the binarized corpus, epochs, processes, compute counted from the shapes,
validation, and the tuning that ends a run."""
