"""mt/plumbing/errors.py: every kind of user error is exit code 2 and one line from the CLI (`--debug`
shows its traceback); any other exception is a bug."""

import pytest

from mt.cli import main


def test_debug_flag_shows_the_traceback(tmp_path):
    (tmp_path / "c.yaml").write_text("model:\n  d_model: 30\n")
    with pytest.raises(Exception, match="must be divisible"):
        main(["--debug", "train", str(tmp_path / "c.yaml")])


def test_every_kind_of_user_error_is_exit_2_and_anything_else_a_bug():
    from mt.cli import _exit_code
    from mt.plumbing.errors import ConfigError, DataError, RunDirError, ServeError, UserError

    for kind in (ConfigError, DataError, RunDirError, ServeError):
        assert issubclass(kind, UserError) and _exit_code(kind("x")) == 2
    assert _exit_code(RuntimeError("x")) is None and _exit_code(KeyError("x")) is None
