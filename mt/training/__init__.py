"""What the training loop (mt/train.py) stands on: the cleaning rules, the binarized corpus, devices and
processes, compute counted from the shapes, and validation."""
