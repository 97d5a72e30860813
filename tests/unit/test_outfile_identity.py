"""One rule for "these two paths name one file" (moeplan.base.outfile.file_identity / same_file), used by every
command's output check (cli._distinct_outputs: outputs against each other and against the files read) and by
calibrate's log-given-twice check. A hard link, a symbolic link and another spelling are one file everywhere."""

from __future__ import annotations

import os

import pytest

from moeplan.calibrate.fit import distinct_logs
from moeplan.cli import main
from moeplan.base.errors import MoeplanError
from moeplan.base.outfile import file_identity, same_file

ESTIMATE = ["estimate", "qwen3-30b-a3b", "--gpu", "h100", "--gpus", "16", "--ep", "16", "--seq-len", "4096",
            "--gbs", "64"]


@pytest.fixture
def files(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("a")
    (tmp_path / "hard.txt").hardlink_to(a)
    (tmp_path / "soft.txt").symlink_to(a)
    (tmp_path / "other.txt").write_text("a")  # same bytes, another file
    (tmp_path / "sub").mkdir()
    (tmp_path / "dirlink").symlink_to(tmp_path / "sub")
    return tmp_path


@pytest.mark.parametrize("other", ["a.txt", "./a.txt", "sub/../a.txt", "hard.txt", "soft.txt"])
def test_links_and_spellings_are_the_same_file(files, other):
    assert same_file(files / "a.txt", str(files) + "/" + other)


@pytest.mark.parametrize("other", ["other.txt", "new.txt", "sub"])
def test_other_files_and_new_paths_are_not(files, other):
    assert not same_file(files / "a.txt", files / other)


def test_new_paths_are_one_file_when_they_resolve_to_one_name(files):
    """A path that does not exist yet is known by its real path: through a symbolic link to its directory too,
    and a dangling symbolic link is the file it would create."""
    assert same_file(files / "sub" / "new.txt", files / "dirlink" / "new.txt")
    (files / "dangling").symlink_to(files / "sub" / "target.txt")
    assert same_file(files / "dangling", files / "sub" / "target.txt")
    assert not same_file(files / "sub" / "new.txt", files / "sub" / "new2.txt")


def test_an_impossible_name_is_only_itself():
    assert file_identity("a\0b") == os.path.abspath("a\0b") and not same_file("a\0b", "a")


def test_identity_of_an_existing_file_is_its_inode(files):
    st = os.stat(files / "a.txt")
    assert file_identity(files / "hard.txt") == (st.st_dev, st.st_ino)


def test_a_log_given_twice_through_a_symbolic_link_is_refused(files):
    with pytest.raises(MoeplanError, match="soft.txt is the same log as .*a.txt: give each log once"):
        distinct_logs([str(files / "a.txt"), str(files / "soft.txt")])
    distinct_logs([str(files / "a.txt"), str(files / "other.txt"), "-"])  # different files and stdin: fine


# ------------------------------------------------------------------------------------------ the CLI's outputs


def test_two_outputs_that_are_hard_links_of_one_file_are_refused(tmp_path, capsys):
    """--plot and --trace named two links of one existing file: the second write would replace the first's."""
    plot, trace = tmp_path / "out.svg", tmp_path / "out.json"
    plot.write_text("old")
    trace.hardlink_to(plot)
    assert main([*ESTIMATE, "--plot", str(plot), "--trace", str(trace)]) == 2
    err = capsys.readouterr().err
    assert f"--plot and --trace name the same file {trace}" in err and err.count("\n") == 1
    assert plot.read_text() == "old"


def test_an_output_that_is_a_hard_link_of_an_input_is_refused(tmp_path, capsys):
    hw = tmp_path / "hw.yaml"
    hw.write_text("gpus:\n  hbw:\n    base: h100\n")
    link = tmp_path / "strategy.yaml"
    link.hardlink_to(hw)
    argv = ["plan", "qwen3-30b-a3b", "--gpu", "hbw", "--hardware", str(hw), "--gpus", "16", "--seq-len", "4k",
            "--gbs", "1024", "--save-strategy", str(link)]
    assert main(argv) == 2
    assert f"--hardware (an input) and --save-strategy name the same file {link}" in capsys.readouterr().err
    assert link.samefile(hw) and hw.read_text().startswith("gpus:")
