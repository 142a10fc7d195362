"""mt/training/session.py: setting up a run checks every input before the first write to the run
directory, and the log names the best validation so far."""

import shutil

from conftest import file_hashes, run_main, sets

from mt.cli import main
from mt.run.progress import Progress
from mt.training.session import best_so_far


def test_bad_corpus_leaves_an_existing_run_untouched(capsys, small_corpus, tiny, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus, corpus)
    run = tmp_path / "run"
    overrides = tiny + [f"data.dir={corpus}", "train.max_steps=2"]
    assert main(["train", "configs/toy.yaml", "--run-dir", str(run), *sets(overrides)]) == 0
    before = file_hashes(run)
    (corpus / "train.en").write_bytes(b"\xff\n")
    overrides[-1] = "train.max_steps=4"  # resume it further: the corpus is read again
    code, err = run_main(capsys, "train", "configs/toy.yaml", "--run-dir", str(run), *sets(overrides))
    assert code == 2 and err.endswith(
        f"mt: error: {corpus}/train.en: line 1 is not valid UTF-8; re-encode the file as UTF-8\n"
    )
    assert file_hashes(run) == before
    code, err = run_main(
        capsys, "train", "configs/toy.yaml", "--run-dir", str(run), "--force-new", *sets(overrides)
    )
    assert code == 2 and "line 1 is not valid UTF-8" in err
    assert file_hashes(run) == before and not list(run.glob("replaced-*"))  # nothing archived either


def test_the_best_so_far_is_named_once_a_validation_has_run():
    """What the resume line and the final log line say of the best validation."""
    progress = Progress(step=4)
    assert best_so_far(progress) == "no validation yet"
    assert progress.record({"val_bleu": 12.5, "val_chrf": 40.0, "val_loss": 3.0}, "bleu")
    progress.validated_step = 4
    assert best_so_far(progress) == "best val BLEU 12.50, chrF 40.00 at step 4"
